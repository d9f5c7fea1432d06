"""merge: D_{r+1} = D_r + the verified tasks (step 7 of the loop). The dataset only grows.

Reads D_r (the dataset version round r trained on) and this round's `verifications`; admits the tasks
whose outcome is in `evolve.admit` (default accept and retain, as the paper keeps both) and that D_r does
not hold yet. Writes their `tasks` rows (source and split `synthesized`, lineage JSON with signal,
trajectory, exploration, group, candidate and verification ids) and `datasets` version r+1: every task of
D_r with its weight, plus the new ones with weight `evolve.signal_weight` when a signal led to them (1
otherwise). `stages.datasets.dataset_source` finds this version for rounds > r.

    coevolve stage merge --run demo --round 9
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from stages.context import RunContext
from stages.datasets import dataset_manifest, load_dataset
from stages.runner import StageDef, StageResult


def admitted_tasks(verifications: Iterable[dict], admit: Iterable[str], known: set[str]) -> list[dict]:
    """Task rows of the admitted verifications, each task once, none that `known` already holds."""
    admit, seen, rows = set(admit), set(known), []
    for v in verifications:
        if v["outcome"] in admit and v["task"] is not None and v["task_id"] not in seen:
            seen.add(v["task_id"])
            rows.append(json.loads(v["task"]))
    return rows


def task_weight(task: dict, signal_weight: float) -> float:
    return signal_weight if json.loads(task["lineage"]).get("signal_id") else 1.0


def merge_dataset(
    previous: list[dict], new_tasks: list[dict], *, version: int, signal_weight: float
) -> list[dict]:
    """`datasets` rows of version `version`: the previous rows re-versioned, then the new tasks."""
    rows = [{**row, "dataset_version": version} for row in previous]
    rows += [
        {
            "dataset_version": version,
            "task_id": t["task_id"],
            "weight": task_weight(t, signal_weight),
            "added_round": version,
        }
        for t in new_tasks
    ]
    return rows


def _inputs(ctx: RunContext, round_: int) -> dict[str, str]:
    return {
        "dataset": dataset_manifest(ctx, round_).content_hash(),
        "verifications": ctx.store.completed(round_, "verify").content_hash(),
    }


def compute_merge(ctx: RunContext, round_: int, key: str) -> StageResult:
    cfg = ctx.config.evolve
    previous = [
        {k: row[k] for k in ("task_id", "weight", "added_round")}
        for row in load_dataset(ctx, round_).to_pylist()
    ]
    verifications = ctx.store.read(round_, "verify", "verifications").to_pylist()
    new_tasks = admitted_tasks(verifications, cfg.admit, {row["task_id"] for row in previous})
    dataset = merge_dataset(previous, new_tasks, version=round_ + 1, signal_weight=cfg.signal_weight)
    return StageResult(
        {"tasks": new_tasks, "datasets": dataset},
        {"dataset_size": len(dataset), "added_tasks": len(new_tasks), "dataset_version": round_ + 1},
    )


MERGE = StageDef("merge", 1, ("evolve",), _inputs, compute_merge)
