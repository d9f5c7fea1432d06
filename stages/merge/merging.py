"""Dataset merge (step 7 of the loop): D_{r+1} = D_r + the admitted tasks, with sampling weights.

The dataset only grows. A verified task is admitted when its outcome is one the config admits and the
dataset does not hold it yet; it weighs `signal_weight` when a signal led to it (1 otherwise), scaled,
with `unsolved_weighting`, by the share of the policy's verification attempts that failed it: one solved
in every attempt weighs 0 and is never drawn, since a GRPO group of K successes has no advantage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


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
