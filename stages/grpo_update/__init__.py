"""The `grpo_update` stage: one GRPO update on exactly round r's samples (step 8 of the loop).

- stage.py: the stage (in process or launched; the GRPO maths is `rl`)

Tests: tests/unit/test_trl_knobs.py, tests/integration/test_distributed_update.py.
"""
