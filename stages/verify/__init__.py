"""The `verify` stage: each candidate executed in the environment, then accept, retain or discard (step 6).

- stage.py: the stage
- verification.py: the verdicts and the rows they are stored as
- candidates.py: a candidate's task and its replayed solution
- checks.py: the environment checks, one pure function each (`CHECKS`)
- contamination.py: the guard against held-out evaluation tasks
- queries.py: what a query must say
- settings.py: the verification's settings from the config

Tests: tests/unit/test_verification.py, test_checks.py, test_contamination.py, test_queries.py.
"""
