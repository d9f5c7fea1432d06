"""merge: D_{r+1} = D_r + the verified tasks (step 7 of the loop). The dataset only grows.

Reads D_r (the dataset version round r trained on) and this round's `verifications`; admits the tasks
whose outcome is in `evolve.admit` (default accept and retain, as the paper keeps both) and that D_r does
not hold yet. Writes their `tasks` rows (source and split `synthesized`, lineage JSON with signal,
trajectory, exploration, group, candidate and verification ids) and `datasets` version r+1: every task of
D_r with its weight, plus the new ones with weight `evolve.signal_weight` when a signal led to them (1
otherwise). With `evolve.unsolved_weighting` a new task's weight is scaled by the share of the policy's
verification attempts (this round's verify `trajectories`) that failed it: one solved in every attempt
weighs 0 and is never drawn, since a GRPO group of K successes has no advantage to learn from.
`stages.datasets.dataset_source` finds this version for rounds > r.

    coevolve stage merge --run demo --round 9
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageDef, StageResult
from coevolve.storage.datasets import dataset_manifest, load_dataset


def admitted_tasks(verifications: Iterable[dict], admit: Iterable[str], known: set[str]) -> list[dict]:
    """Task rows of the admitted verifications, each task once, none that `known` already holds."""
    admit, seen, rows = set(admit), set(known), []
    for v in verifications:
        if v["outcome"] in admit and v["task"] is not None and v["task_id"] not in seen:
            seen.add(v["task_id"])
            rows.append(json.loads(v["task"]))
    return rows


def solved_shares(attempts: Iterable[dict]) -> dict[str, float]:
    """Per task id, the share of the policy's verification attempts (trajectory rows) that solved it."""
    outcomes: dict[str, list[bool]] = {}
    for t in attempts:
        outcomes.setdefault(t["task_id"], []).append(bool(t["success"]))
    return {task_id: sum(o) / len(o) for task_id, o in outcomes.items()}


def task_weight(task: dict, signal_weight: float, solved_share: float | None = None) -> float:
    """`signal_weight` for a task a signal led to, else 1; times the share of failed verification
    attempts when `solved_share` is given."""
    weight = signal_weight if json.loads(task["lineage"]).get("signal_id") else 1.0
    return weight if solved_share is None else weight * (1.0 - solved_share)


def merge_dataset(
    previous: list[dict],
    new_tasks: list[dict],
    *,
    version: int,
    signal_weight: float,
    solved: dict[str, float] | None = None,
) -> list[dict]:
    """`datasets` rows of version `version`: the previous rows re-versioned, then the new tasks. `solved`
    (task id -> share of verification attempts solved) scales a new task's weight by its failed share;
    a task it does not name (admitted without attempts) keeps its weight."""
    solved = solved or {}
    rows = [{**row, "dataset_version": version} for row in previous]
    rows += [
        {
            "dataset_version": version,
            "task_id": t["task_id"],
            "weight": task_weight(t, signal_weight, solved.get(t["task_id"])),
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
    solved = (solved_shares(ctx.store.read(round_, "verify", "trajectories").to_pylist())
              if cfg.unsolved_weighting else None)  # fmt: skip
    dataset = merge_dataset(previous, new_tasks, version=round_ + 1, signal_weight=cfg.signal_weight,
                            solved=solved)  # fmt: skip
    never_drawn = sum(row["weight"] == 0 for row in dataset[len(previous) :])
    return StageResult(
        {"tasks": new_tasks, "datasets": dataset},
        {
            "dataset_size": len(dataset),
            "added_tasks": len(new_tasks),
            "dataset_version": round_ + 1,
            "added_never_drawn": never_drawn,
        },
    )


MERGE = StageDef("merge", 1, ("evolve",), _inputs, compute_merge)
