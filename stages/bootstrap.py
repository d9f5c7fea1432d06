"""bootstrap: build D_0, the dataset version that round 0 trains on.

For now D_0 is seeded from an environment split (`dataset.seed_split`, optionally a seeded sample of
`dataset.max_tasks`); every task gets weight 1. Writes the seed `tasks` rows and `datasets` version 0.
"""

from __future__ import annotations

import random

from envs.base import content_hash
from stages.context import RunContext
from stages.datasets import task_row
from stages.runner import StageDef, StageResult


def _seed_tasks(ctx: RunContext):
    cfg = ctx.config.dataset
    tasks = ctx.env_tasks(cfg.seed_split)
    if cfg.max_tasks is not None and cfg.max_tasks < len(tasks):
        tasks = random.Random(ctx.config.run.seed).sample(tasks, cfg.max_tasks)
    return tasks


def _inputs(ctx: RunContext, round_: int) -> dict[str, str]:
    return {"seed_tasks": content_hash([t.id for t in _seed_tasks(ctx)])}


def build_seed_dataset(ctx: RunContext, round_: int, key: str) -> StageResult:
    tasks = _seed_tasks(ctx)
    rows = [{**task_row(t), "source": "seed"} for t in tasks]
    dataset = [{"dataset_version": 0, "task_id": t.id, "weight": 1.0, "added_round": 0} for t in tasks]
    return StageResult({"tasks": rows, "datasets": dataset}, {"dataset_size": len(tasks)})


BOOTSTRAP = StageDef("bootstrap", 1, ("env", "dataset", "run"), _inputs, build_seed_dataset)
