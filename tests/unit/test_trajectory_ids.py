"""A trajectory id names one episode forever: it hashes what the episode was (its messages, how it ended,
its reward) with where it ran, so an identical episode keeps its id and a changed one gets another; `coevolve
fork` derives the ids of its copies from the rows alone, for runs made before ids held the content too."""

from __future__ import annotations

import json

import pytest

from coevolve.agents.ledger import trajectory_id
from coevolve.core import content_hash
from coevolve.flows.fork import _id_map
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import ArtifactError
from coevolve.storage.store import RunStore

SOLVED = json.dumps([{"role": "user", "content": "balance?"}, {"role": "assistant", "content": "Done. 42"}])
CUT = json.dumps([{"role": "user", "content": "balance?"}, {"role": "assistant", "content": "<tool_call>\n{"}])


def row(**changes) -> dict:
    base = {"source": "rollout", "task_id": "t1", "group_id": "g", "sample": 0, "policy_version": "base-1",
            "reward": 1.0, "success": True, "finish": "done", "error": None, "num_turns": 1, "num_steps": 1,
            "num_tool_calls": 0, "num_tool_errors": 0, "prompt_tokens": 5, "completion_tokens": 3,
            "messages": SOLVED, "eval_details": "{}"}  # fmt: skip
    return {**base, **changes}


def test_the_same_episode_keeps_its_id_and_a_changed_one_gets_another():
    assert trajectory_id("demo", 0, row()) == trajectory_id("demo", 0, row(num_steps=9, eval_details="{1}"))
    changed = [row(messages=CUT), row(finish="length"), row(error="could not parse tool call"), row(reward=0.0),
               row(success=False)]  # fmt: skip
    ids = {trajectory_id("demo", 0, r) for r in changed} | {trajectory_id("demo", 0, row())}
    assert len(ids) == len(changed) + 1
    # where it ran still counts: the same episode in another run, round or sample is another trajectory
    assert len({trajectory_id("demo", 0, row()), trajectory_id("other", 0, row()), trajectory_id("demo", 1, row()),
                trajectory_id("demo", 0, row(sample=1))}) == 4  # fmt: skip


def _stored(tmp_path, rows: list[dict]) -> tuple[RunStore, Manifest]:
    store = RunStore(RunLayout(tmp_path, "src"))
    manifest = Manifest("rollout", "src", 0, "key", 1)
    manifest.artifacts["trajectories"] = store.write(0, "rollout", "trajectories", rows)
    store.write_manifest(manifest.finish())
    return store, manifest


def test_a_fork_derives_its_copies_ids_from_the_rows_older_ids_included(tmp_path):
    legacy = row(sample=1, messages=CUT)
    legacy_id = content_hash(["src", 0, "rollout", "t1", 1, "base-1"])  # before ids hashed the episode
    rows = [{"trajectory_id": trajectory_id("src", 0, row()), **row()}, {"trajectory_id": legacy_id, **legacy}]
    store, manifest = _stored(tmp_path, rows)
    ids = _id_map(store, 0, "rollout", manifest, "dst")
    assert ids[rows[0]["trajectory_id"]] == trajectory_id("dst", 0, row())
    assert ids[legacy_id] == trajectory_id("dst", 0, legacy)  # the copy gets a content id


def test_a_fork_refuses_an_id_it_cannot_derive(tmp_path):
    store, manifest = _stored(tmp_path / "x", [{"trajectory_id": "not-derivable", **row()}])
    with pytest.raises(ArtifactError, match="trajectory not-derivable .* does not have a derivable id"):
        _id_map(store, 0, "rollout", manifest, "dst")


def test_the_task_page_says_when_a_signals_episode_is_gone_and_why(tmp_path):
    from coevolve.storage.manifest import InputRef
    from coevolve.ui.lineage import signal_trajectory
    from coevolve.ui.reader import RunsReader

    kept = trajectory_id("src", 0, row())
    store, _ = _stored(tmp_path, [{"trajectory_id": kept, **row()}])
    signals = Manifest("signals", "src", 0, "key", 1, read_from=[InputRef(0, "rollout", "artifacts.trajectories", "x")])
    store.write_manifest(signals.finish())  # it read trajectories the rollout has rewritten since
    reader = RunsReader(tmp_path)
    signal = {"trajectory_id": kept, "trajectory_round": 0, "round": 0, "stage": "signals"}
    assert signal_trajectory(reader, "src", signal)["trajectory"]["trajectory_id"] == kept
    gone = signal_trajectory(reader, "src", {**signal, "trajectory_id": trajectory_id("src", 0, row(reward=0.0))})
    assert gone["trajectory"] is None
    assert gone["why"] == ("not in the run any more: its stage was re-run with other episodes, so round 0 signals "
                           "is stale (reads round 0 rollout's trajectories, rewritten since it ran)")  # fmt: skip
