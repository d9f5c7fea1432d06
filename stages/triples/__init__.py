"""The `triples` stage: every explored tool call as an (action, observation, exploration) triple (step 4).

- stage.py: the stage
- grouping.py: state digests around each call, triples grouped per exploration

Tests: tests/unit/test_triples.py.
"""
