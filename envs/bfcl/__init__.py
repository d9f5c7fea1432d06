"""BFCL v4 multi-turn (package `bfcl-eval`, pinned 2026.3.23) as a CoEvolve environment: `envs.make("bfcl")`.

Modules: `data` (package files, tasks, splits), `parsing` (python-list / Hermes / list actions),
`backends` (our executor: fresh instances, dict dispatch), `checker` (BFCL's success rule), `state`
(public-state digest), `env` (`BfclEnv`).
"""

from coevolve.envs.bfcl.env import BfclEnv

__all__ = ["BfclEnv"]
