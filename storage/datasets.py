"""Dataset versions D_r: manifests of task ids and sampling weights, never copies of task rows.

D_0 is written by `bootstrap` in round 0; `merge` in round r (data evolution) writes D_{r+1}. Round r
trains on the newest version written by round r or earlier: `bootstrap` of round 0 or `merge` of a round
< r. Task rows live in the `tasks` artifacts of those same stages.
"""

from __future__ import annotations

import json
import math
import random

import pyarrow as pa
from coevolve.envs.base import Task
from coevolve.pipeline.context import RunContext
from coevolve.storage.manifest import Manifest

from coevolve.core import ToolCall

DATASET_STAGES = ("merge", "bootstrap")


def task_row(task: Task) -> dict:
    solution = None if task.solution is None else [[c.model_dump() for c in turn] for turn in task.solution]
    return {
        "task_id": task.id, "env": task.env, "split": task.split, "family": task.family,
        "source": task.source, "turns": json.dumps(task.turns), "initial_state": json.dumps(task.initial_state),
        "solution": None if solution is None else json.dumps(solution),
        "checker": json.dumps(task.checker), "lineage": json.dumps(task.lineage),
    }


def task_from_row(row: dict) -> Task:
    solution = row["solution"]
    return Task(
        id=row["task_id"], env=row["env"], split=row["split"], family=row["family"], source=row["source"],
        turns=json.loads(row["turns"]), initial_state=json.loads(row["initial_state"]),
        solution=None if solution is None else [[ToolCall(**c) for c in t] for t in json.loads(solution)],
        checker=json.loads(row["checker"]), lineage=json.loads(row["lineage"]),
    )


def dataset_source(ctx: RunContext, round_: int) -> tuple[int, str]:
    """(round, stage) whose `datasets` artifact is the version round `round_` trains on."""
    for r in range(round_ - 1, -1, -1):
        if ctx.store.manifest(r, "merge") is not None:
            return r, "merge"
    return 0, "bootstrap"


def dataset_manifest(ctx: RunContext, round_: int) -> Manifest:
    r, stage = dataset_source(ctx, round_)
    return ctx.store.completed(r, stage)


def load_dataset(ctx: RunContext, round_: int) -> pa.Table:
    r, stage = dataset_source(ctx, round_)
    return ctx.store.read(r, stage, "datasets")


def load_tasks(ctx: RunContext, task_ids: list[str], round_: int) -> list[Task]:
    """The Task objects for `task_ids`, from the `tasks` artifacts written up to `round_`."""
    wanted, found = set(task_ids), {}
    for r in range(round_, -1, -1):
        for stage in DATASET_STAGES:
            if ctx.store.manifest(r, stage) is None or not wanted - found.keys():
                continue
            for row in ctx.store.read(r, stage, "tasks").to_pylist():
                if row["task_id"] in wanted:
                    found.setdefault(row["task_id"], task_from_row(row))
    missing = wanted - found.keys()
    if missing:
        raise RuntimeError(f"dataset refers to {len(missing)} unknown task ids, e.g. {sorted(missing)[0]}")
    return [found[i] for i in task_ids]


def sample_task_ids(dataset: pa.Table, n: int, rng: random.Random, *, newest_share: float = 0.0) -> list[str]:
    """`n` distinct task ids drawn with probability proportional to weight (Efraimidis-Spirakis keys).

    `newest_share` (`rollout.newest_share`) of the `n` draws, rounded up, are taken first from the tasks the
    latest data evolution that added any added (the dataset's highest `added_round` above 0), by the same
    keys; the rest from all other tasks. Without merged tasks, or at 0, the draw is the plain weighted one.
    """
    ids, weights = dataset.column("task_id").to_pylist(), dataset.column("weight").to_pylist()
    added = dataset.column("added_round").to_pylist()
    keyed = [(math.log(rng.random() or 1e-300) / w, i, a) for i, w, a in zip(ids, weights, added, strict=True)
             if w > 0]  # fmt: skip
    keyed.sort(reverse=True)
    newest = max(added, default=0)
    reserved = math.ceil(newest_share * n) if newest > 0 else 0
    first = [i for _, i, a in keyed if a == newest][:reserved]
    taken = set(first)
    return first + [i for _, i, _ in keyed if i not in taken][: n - len(first)]
