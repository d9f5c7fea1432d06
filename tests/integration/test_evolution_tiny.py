"""Data evolution through the real flow: test-tiny.yaml with `evolve.every=1`, two rounds.

A random tiny model never emits a tool call, so no weakness signal would ever fire and no teacher reply
would parse. The shared `evolved_run` fixture (tests/conftest.py: `run_evolved`) therefore swaps in two
named fakes: the policy *engine* is an oracle that solves every other episode of a training task (GRPO
groups with successes and failures: boundary signals; the tiny model itself is still trained by
grpo_update), and the teacher is the scripted fake. Everything else is real: Prefect, the stage runner,
the tool world, Parquet and DuckDB.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_evolved
from tests.unit.test_evolution_round import LINEAGE_SQL

pytestmark = pytest.mark.slow

EVOLUTION = ["signals", "explore", "triples", "abstract", "verify", "merge"]


def test_evolution_grows_the_dataset_and_keeps_lineage(evolved_run):
    from coevolve.storage.catalog import query

    root = evolved_run.root
    for stages_of_round in evolved_run.result["rounds"]:
        assert [s for s in stages_of_round if s in EVOLUTION] == EVOLUTION

    sizes = query(root, "SELECT dataset_version, count(*) AS n FROM datasets GROUP BY ALL ORDER BY ALL")
    n = {row["dataset_version"]: row["n"] for row in sizes.to_pylist()}
    assert n[0] < n[1] <= n[2]

    lineage = query(root, LINEAGE_SQL).to_pylist()
    assert lineage and all(row["later_trajectory"] for row in lineage)
    synthesized = query(root, "SELECT count(*) AS n FROM tasks WHERE source = 'synthesized'").to_pylist()
    assert synthesized[0]["n"] == n[2] - n[0]


def test_evolution_rerun_is_cached(evolved_run, tmp_path):
    import shutil

    shutil.copytree(evolved_run.root / f"run={evolved_run.run}", tmp_path / f"run={evolved_run.run}")
    again = run_evolved(tmp_path, evolved_run.run)
    assert all(set(r.values()) == {"cached"} for r in again["rounds"])
