"""Data evolution through the real flow: test-tiny.yaml with `evolve.every=1`, two rounds.

A random tiny model never emits a tool call, so no weakness signal would ever fire and no teacher reply
would parse. The test therefore swaps in two named fakes: the policy *engine* is an oracle that solves
every other episode of a training task (GRPO groups with successes and failures: boundary signals; the
tiny model itself is still trained by grpo_update), and the teacher is the scripted fake (monkeypatched
`stages.teacher.make_teacher`). Everything else is real: Prefect, the stage runner, the tool world,
Parquet and DuckDB.
"""

from __future__ import annotations

import pytest

import stages.teacher
from tests.conftest import CONFIGS
from tests.fakes.teacher import OracleEngine, ScriptedTeacher
from tests.unit.test_evolution_round import LINEAGE_SQL

pytestmark = pytest.mark.slow

EVOLUTION = ["signals", "explore", "triples", "abstract", "verify", "merge"]


def test_evolution_grows_the_dataset_and_keeps_lineage(tmp_path, monkeypatch, prefect_api):
    from flows.coevolve import coevolve
    from stages.policy import Policy
    from storage.catalog import query

    load_base = Policy.load_base

    def load_base_with_oracle(self):
        load_base(self)
        import envs
        from flows.config import load_config

        cfg = load_config(CONFIGS / "test-tiny.yaml")
        train = envs.make(cfg.env.name, **cfg.env.options).tasks("train")
        self.engine = OracleEngine(self.tokenizer, train, solve="alternate", version=self.version)

    monkeypatch.setattr(Policy, "load_base", load_base_with_oracle)
    monkeypatch.setattr(
        stages.teacher,
        "make_teacher",
        lambda ctx, round_: ScriptedTeacher(ctx.use_policy(round_ - 1).tokenizer, ctx.env_tasks("train")),
    )
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    result = coevolve(str(CONFIGS / "test-tiny.yaml"), run="evo", rounds=2, overrides=["evolve.every=1"])
    for stages_of_round in result["rounds"]:
        assert [s for s in stages_of_round if s in EVOLUTION] == EVOLUTION

    sizes = query(tmp_path, "SELECT dataset_version, count(*) AS n FROM datasets GROUP BY ALL ORDER BY ALL")
    n = {row["dataset_version"]: row["n"] for row in sizes.to_pylist()}
    assert n[0] < n[1] <= n[2]

    lineage = query(tmp_path, LINEAGE_SQL).to_pylist()
    assert lineage and all(row["later_trajectory"] for row in lineage)
    synthesized = query(tmp_path, "SELECT count(*) AS n FROM tasks WHERE source = 'synthesized'").to_pylist()
    assert synthesized[0]["n"] == n[2] - n[0]

    again = coevolve(str(CONFIGS / "test-tiny.yaml"), run="evo", rounds=2, overrides=["evolve.every=1"])
    assert all(set(r.values()) == {"cached"} for r in again["rounds"])
