"""`coevolve fork`: a run started from another run's identical stages computes what it would have alone."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFIGS

pytestmark = pytest.mark.slow

TINY = CONFIGS / "test-tiny.yaml"
EVOLVING = ["evolve.every=1"]
BASE_STAGES = ["bootstrap", "baseline", "rollout", "grpo_update", "evaluate"]


def _rows(root, run: str, sql: str) -> list[dict]:
    from coevolve.storage.catalog import query

    return query(root, sql.replace("RUN", f"'{run}'")).to_pylist()


@pytest.fixture(scope="module")
def grpo_root(tmp_path_factory, prefect_api):
    """A storage root holding a 2-round GRPO run `grpo` of test-tiny.yaml (evolve.every: 0)."""
    from coevolve.flows.coevolve import coevolve

    root = tmp_path_factory.mktemp("fork")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COEVOLVE_HOME", str(root))
        coevolve(str(TINY), run="grpo", rounds=2)
    return root


def test_fork_copies_round_zero_and_the_run_ends_as_if_computed_alone(grpo_root, monkeypatch):
    from coevolve.config import load_config
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.fork import fork_run

    tmp_path = grpo_root
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    alone = coevolve(str(TINY), run="alone", rounds=2, overrides=EVOLVING)

    copied = fork_run(load_config(TINY, EVOLVING), tmp_path, "grpo", "forked", rounds=2)
    # round 1's rollout reads round 0's merged dataset, which grpo never computed: only round 0 is shared
    assert copied == [(0, stage) for stage in BASE_STAGES]
    forked = coevolve(str(TINY), run="forked", rounds=2, overrides=EVOLVING)
    assert [s for s, state in forked["rounds"][0].items() if state == "cached"] == BASE_STAGES
    assert forked["rounds"][0]["signals"] == "computed" and set(forked["rounds"][1].values()) == {"computed"}
    assert list(forked["rounds"][1]) == list(alone["rounds"][1])

    # the same episodes, updates and evaluations as the run that computed everything itself
    episodes = "SELECT round, source, task_id, sample, reward, messages FROM trajectories WHERE run = RUN ORDER BY ALL"
    assert _rows(tmp_path, "forked", episodes) == _rows(tmp_path, "alone", episodes)
    updates = "SELECT round, policy_version, loss, checkpoint FROM updates WHERE run = RUN ORDER BY round"
    forked_updates, alone_updates = _rows(tmp_path, "forked", updates), _rows(tmp_path, "alone", updates)
    assert [(u["round"], u["loss"]) for u in forked_updates] == [(u["round"], u["loss"]) for u in alone_updates]
    assert all(u["checkpoint"] == f"checkpoints/round={u['round']}" for u in forked_updates)
    assert (tmp_path / "run=forked" / "checkpoints" / "round=1").is_dir()

    # ids belong to the new run, and its ledger still joins
    ids = "SELECT trajectory_id FROM trajectories WHERE run = RUN"
    assert not {r["trajectory_id"] for r in _rows(tmp_path, "forked", ids)} & {
        r["trajectory_id"] for r in _rows(tmp_path, "grpo", ids)}
    joined = _rows(tmp_path, "forked", """
        SELECT count(*) AS n, count(t.trajectory_id) AS matched FROM samples s
        LEFT JOIN trajectories t ON t.run = s.run AND t.trajectory_id = s.trajectory_id
        AND t.group_id = s.group_id WHERE s.run = RUN""")  # fmt: skip
    assert joined[0]["n"] == joined[0]["matched"] > 0

    manifest = json.loads((tmp_path / "run=forked/round=0/stage=rollout/_manifest.json").read_text())
    assert manifest["forked_from"] == "grpo" and manifest["run"] == "forked" and manifest["seconds"] > 0


def test_fork_copies_nothing_a_config_change_touches(grpo_root):
    from coevolve.config import load_config
    from coevolve.flows.fork import fork_run
    from coevolve.flows.runs import RunError

    tmp_path = grpo_root
    # the learning rate changes the update, hence the evaluation of its policy; the seed dataset, the
    # zero-shot baseline and the rollout of the base policy stay
    copied = fork_run(load_config(TINY, ["train.lr=0.01"]), tmp_path, "grpo", "faster", rounds=1)
    assert copied == [(0, "bootstrap"), (0, "baseline"), (0, "rollout")]
    with pytest.raises(RunError, match="has stages already"):
        fork_run(load_config(TINY), tmp_path, "grpo", "faster", rounds=1)
    with pytest.raises(RunError, match="no run 'nope'"):
        fork_run(load_config(TINY), tmp_path, "nope", "other", rounds=1)
