"""The `signals` stage: forgetting, boundary and rare signals over the rollout ledger (step 2 of the loop), and
the `unused` kind (an extension).

- stage.py: the stage (which rounds' trajectories, the offered tools)
- rules.py: the signal rules, pure functions over polars frames (`extract_signals`)

Tests: tests/unit/test_signals.py, test_signals_extensions.py.
"""
