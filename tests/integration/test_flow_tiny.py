"""The real loop end to end: test-tiny.yaml through the Prefect flow, Parquet artifacts, DuckDB views."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS

pytestmark = pytest.mark.slow


def _run(rounds: int):
    from coevolve.flows.coevolve import coevolve

    return coevolve(str(CONFIGS / "test-tiny.yaml"), run="tiny", rounds=rounds)


def test_rounds_run_continue_and_rerun_as_noop(tmp_path, monkeypatch, prefect_api):
    from coevolve.storage.catalog import query

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    first = _run(1)
    assert set(first["rounds"][0].values()) == {"computed"}
    assert list(first["rounds"][0]) == ["bootstrap", "baseline", "rollout", "grpo_update", "evaluate"]

    second = _run(2)  # continues: round 0 is cached, round 1 runs
    assert set(second["rounds"][0].values()) == {"cached"}
    assert set(second["rounds"][1].values()) == {"computed"}

    third = _run(2)  # the same command again recomputes nothing
    assert all(set(r.values()) == {"cached"} for r in third["rounds"])

    counts = query(tmp_path, "SELECT round, source, count(*) AS n FROM trajectories "
                             "GROUP BY ALL ORDER BY ALL").to_pylist()
    assert {"round": 0, "source": "rollout", "n": 2 * 4} in counts
    assert {"round": 1, "source": "rollout", "n": 2 * 4} in counts
    assert {"round": 1, "source": "eval:test", "n": 4} in counts

    samples = query(tmp_path, "SELECT input_ids, loss_mask, logprobs, num_policy_tokens FROM samples").to_pylist()
    for s in samples:
        assert len(s["input_ids"]) == len(s["loss_mask"]) == len(s["logprobs"])
        assert sum(s["loss_mask"]) == s["num_policy_tokens"] > 0
        assert all(lp == 0.0 for lp, m in zip(s["logprobs"], s["loss_mask"], strict=True) if m == 0)

    updates = query(tmp_path, "SELECT round, base_version, policy_version FROM updates ORDER BY round").to_pylist()
    assert [u["round"] for u in updates] == [0, 1]
    assert updates[1]["base_version"] == updates[0]["policy_version"] != updates[0]["base_version"]

    steps = query(tmp_path, "SELECT count(*) AS n FROM steps s JOIN trajectories t USING (trajectory_id)")
    assert steps.to_pylist()[0]["n"] > 0
    assert (tmp_path / "catalog.duckdb").exists()
    assert (tmp_path / "run=tiny" / "config.yaml").exists()
