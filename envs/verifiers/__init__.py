"""verifiers v1 tasksets (`verifiers==0.4.0`) in CoEvolve: `env.VerifiersEnv` runs a taskset in its own venv
(`.venv-verifiers`, `make verifiers-env`) through `bridge.py`; `stock_taskset` is a small taskset of our own
(docs/openenv.md, "verifiers v1")."""
