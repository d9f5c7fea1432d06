"""The `evaluate` stage: the policy after round r on held-out splits the dataset never contains.

- stage.py: the stage and its evaluation settings (`eval_settings`)

Tests: tests/unit/test_eval_samples.py.
"""
