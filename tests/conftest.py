"""Shared fixtures: an isolated Prefect API for flow tests, paths of the shipped configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


@pytest.fixture(scope="session")
def prefect_api():
    """A temporary Prefect database and API for the whole session (real Prefect, no ~/.prefect)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def run_evolved(root: Path, run: str = "evo", rounds: int = 2) -> dict:
    """test-tiny.yaml with `evolve.every=1` through the real flow, with the named fakes that make every
    evolution phase produce rows: an oracle policy engine that solves every other episode (boundary
    signals) and the scripted teacher (see tests/integration/test_evolution_tiny.py). Needs a Prefect API."""
    import envs
    import stages.teacher
    from flows.coevolve import coevolve
    from flows.config import load_config
    from stages.policy import Policy
    from tests.fakes.teacher import OracleEngine, ScriptedTeacher

    load_base = Policy.load_base

    def load_base_with_oracle(self):
        load_base(self)
        cfg = load_config(CONFIGS / "test-tiny.yaml")
        train = envs.make(cfg.env.name, **cfg.env.options).tasks("train")
        self.engine = OracleEngine(self.tokenizer, train, solve="alternate", version=self.version)

    def scripted(ctx, round_):
        return ScriptedTeacher(ctx.use_policy(round_ - 1).tokenizer, ctx.env_tasks("train"))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Policy, "load_base", load_base_with_oracle)
        mp.setattr(stages.teacher, "make_teacher", scripted)
        mp.setenv("COEVOLVE_HOME", str(root))
        return coevolve(str(CONFIGS / "test-tiny.yaml"), run=run, rounds=rounds, overrides=["evolve.every=1"])


@pytest.fixture(scope="session")
def evolved_run(tmp_path_factory, prefect_api) -> tuple[Path, str]:
    """(storage root, run name) of one evolving tiny run (2 rounds), shared by the read-only tests:
    SQL docs, `coevolve show`/`runs`, the notebook. Tests must not write under this root."""
    root = tmp_path_factory.mktemp("evolved")
    run_evolved(root, "evo")
    return root, "evo"
