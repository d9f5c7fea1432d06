"""The `rollout` stage: K episodes for each drawn task of D_r, with the current policy (step 1 of the loop).

- stage.py: the stage (the episode loop is `agents.episodes`)

Tests: tests/unit/test_stage_cache.py.
"""
