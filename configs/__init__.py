"""Run configs shipped with CoEvolve (`coevolve run test-tiny` finds them by name outside a checkout) and the
Prefect deployment file `deploy/prefect.yaml`; data only."""
