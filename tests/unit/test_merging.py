"""Merge (step 7): admission and weights of verified tasks, and how rollout draws from the merged dataset."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.compute as pc

from coevolve.stages.merge.merging import admitted_tasks, merge_dataset, solved_shares
from coevolve.storage.datasets import sample_task_ids


def test_merge_admits_configured_outcomes_once_with_weights(verified):
    verifications = verified.out["verifications"]
    both = admitted_tasks(verifications, ("accept", "retain"), known=set())
    only = admitted_tasks(verifications, ("accept",), known=set())
    assert [t["task_id"] for t in only] == [verified.by_candidate["accept"]["task_id"]]
    assert len(both) == 2
    assert (
        admitted_tasks(verifications + verifications, ("accept", "retain"), known={only[0]["task_id"]})
        == both[1:]
    )
    unlinked = {**both[1], "lineage": json.dumps({"exploration_id": "x"})}
    previous = [{"task_id": "seed", "weight": 2.0, "added_round": 0}]
    rows = merge_dataset(previous, [both[0], unlinked], version=4, signal_weight=3.0)
    assert rows == [
        {"task_id": "seed", "weight": 2.0, "added_round": 0, "dataset_version": 4},
        {"dataset_version": 4, "task_id": both[0]["task_id"], "weight": 3.0, "added_round": 4},
        {"dataset_version": 4, "task_id": unlinked["task_id"], "weight": 1.0, "added_round": 4},
    ]


def test_unsolved_weighting_scales_new_tasks_by_failed_attempts_and_never_draws_mastered_ones(verified):
    tasks = admitted_tasks(verified.out["verifications"], ("accept", "retain"), known=set())
    mastered, learnable = tasks[0]["task_id"], tasks[1]["task_id"]
    attempts = [{"task_id": mastered, "success": True}] * 4 + [
        {"task_id": learnable, "success": s} for s in (True, False, False, False)]  # fmt: skip
    solved = solved_shares(attempts)
    assert solved == {mastered: 1.0, learnable: 0.25}
    previous = [{"task_id": f"seed-{i}", "weight": 1.0, "added_round": 0} for i in range(20)]
    rows = merge_dataset(previous, tasks, version=1, signal_weight=8.0, solved=solved)
    weights = {r["task_id"]: r["weight"] for r in rows}
    assert weights[mastered] == 0.0 and weights[learnable] == 6.0 and weights["seed-0"] == 1.0
    # Unverified tasks (no attempts) keep their weight.
    assert merge_dataset([], tasks, version=1, signal_weight=8.0, solved={})[0]["weight"] == 8.0
    # The reserved draws go to the learnable task; the mastered one is never drawn.
    dataset = pa.Table.from_pylist([{k: r[k] for k in ("task_id", "weight", "added_round")} for r in rows])
    draws = [sample_task_ids(dataset, 4, random.Random(s), newest_share=0.5) for s in range(30)]
    assert all(learnable in ids and mastered not in ids and len(ids) == 4 for ids in draws)


def test_rollout_draws_reserve_a_share_for_the_newest_admitted_tasks():
    ids = [f"seed-{i}" for i in range(200)] + ["old"] + [f"new-{i}" for i in range(3)]
    dataset = pa.table({"task_id": ids, "weight": [1.0] * 200 + [40.0] * 4, "added_round": [0] * 200 + [1, 2, 2, 2]})
    plain = [sample_task_ids(dataset, 4, random.Random(s)) for s in range(50)]
    shared = [sample_task_ids(dataset, 4, random.Random(s), newest_share=0.5) for s in range(50)]
    assert any(sum(i.startswith("new") for i in ids) < 2 for ids in plain)
    assert all(sum(i.startswith("new") for i in ids) >= 2 and len(set(ids)) == 4 for ids in shared)
    # Without a merged task, and at share 0, the reserved draw is the plain weighted one.
    seeds_only = dataset.filter(pc.equal(dataset["added_round"], 0))
    assert sample_task_ids(seeds_only, 4, random.Random(3), newest_share=0.5) == sample_task_ids(
        seeds_only, 4, random.Random(3))
    assert sample_task_ids(dataset, 4, random.Random(3), newest_share=0.0) == plain[3]
    # "Newest" is the latest round that added any: round 1's task once round 2 added none.
    older = dataset.filter(pc.invert(pc.starts_with(dataset["task_id"], "new")))
    assert all("old" in sample_task_ids(older, 4, random.Random(s), newest_share=0.25) for s in range(20))
