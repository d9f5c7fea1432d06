"""The `abstract` stage: the teacher turns each triple group into candidate tasks (step 5 of the loop).

- stage.py: the stage
- abstraction.py: groups, the abstraction prompt's calls, parsing replies into candidates
- similarity.py: when two tasks are the same task (duplicates; the contamination guard uses it too)
- prompting.py, prompts/: abstract.md and the start of its reply

Tests: tests/unit/test_abstraction.py, test_single_call_lineage.py.
"""
