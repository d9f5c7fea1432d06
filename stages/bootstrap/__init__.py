"""The `bootstrap` stage: D_0, the dataset version round 0 trains on.

- stage.py: the stage (seed tasks, the seed-twin guard, synthesized bootstrap tasks)

Tests: tests/unit/test_seed_guard.py.
"""
