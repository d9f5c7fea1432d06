"""The `baseline` stage: the initial policy scored on the held-out splits in round 0.

- stage.py: the stage (the `evaluate` stage's evaluation, before any update)

Tests: tests/unit/test_eval_samples.py.
"""
