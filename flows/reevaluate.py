"""Evaluate a run's policy on tasks it never met: the environment's splits under other options (another
seed draws tasks no run of this project used), or another environment's (the paper's transfer row: trained
on one, tested on another), none of the run's own tasks or its warm start's, nothing written into the run.

    coevolve eval --run learning-grpo-s0 --env-seed 9001 --split validation
    coevolve eval --run demo --env bfcl --split test --max-tasks 20      # tool world -> BFCL

The evaluation is the `evaluate` stage's (`stages.evaluate.stage.eval_settings`: greedy by default, the run's
reply and token limits) with the policy after `round` (default: the run's last update). Its rows
(`evals`, `trajectories`, `steps`, the run's schemas) and `evaluation.json` go to their own folder,
`<root>/evaluations/<run>/round=<r>-<options key>/`; read them with DuckDB's `read_parquet`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coevolve import envs
from coevolve.core import content_hash
from coevolve.pipeline.context import RunContext
from coevolve.stages.evaluate.stage import eval_sample, eval_settings
from coevolve.stages.warm_start.adapters import RECORD
from coevolve.storage.parquet import to_table, write_table, write_text_atomic
from coevolve.storage.schemas import schema_for


def last_update(ctx: RunContext) -> int:
    """The last round whose `grpo_update` completed; ValueError naming the run when none did."""
    rounds = [r for r in ctx.store.layout.rounds() if ctx.store.manifest(r, "grpo_update") is not None]
    if not rounds:
        raise ValueError(f"run '{ctx.run}' has no completed grpo_update: nothing to evaluate")
    return max(rounds)


def warm_start_tasks(model: str) -> set[str]:
    """Ids of the tasks a warm-started policy was fine-tuned on (its build record), else none."""
    record = Path(model) / RECORD
    return set(json.loads(record.read_text()).get("task_ids", [])) if record.is_file() else set()


def fresh_tasks(ctx: RunContext, env: str, options: dict[str, Any], splits: Sequence[str],
                max_tasks: int | None) -> tuple[dict[str, list], int]:  # fmt: skip
    """The tasks of `splits` in environment `env` made with `options`, less every task id of the run's own
    environment (any split) and of its warm start, and every task whose world (initial state) the run
    trained on (its seed split's); and how many were left out for that."""
    own = envs.make(ctx.config.env.name, **ctx.config.env.options)
    taken = {task.id for split in own.splits() for task in own.tasks(split)} | warm_start_tasks(ctx.config.model.name)
    seed_split = ctx.config.dataset.seed_split
    trained = {content_hash(t.initial_state) for t in own.tasks(seed_split)} if seed_split else set()
    if env not in envs.available():
        raise ValueError(f"--env: no environment {env!r}; environments: {', '.join(envs.available())}")
    try:
        other = envs.make(env, **options)
    except TypeError as exc:
        raise ValueError(f"environment {env!r} does not take the options {options}: {exc}") from None
    unknown = sorted(set(splits) - set(other.splits()))
    if unknown:
        raise ValueError(f"environment {env!r} has no split {unknown[0]!r}; splits: {', '.join(other.splits())}")
    tasks, left_out = {}, 0
    for split in splits:
        listed = other.tasks(split)
        kept = [task for task in listed if task.id not in taken and content_hash(task.initial_state) not in trained]
        left_out += len(listed) - len(kept)
        tasks[split] = eval_sample(kept, split, max_tasks)
    if not any(tasks.values()):
        raise ValueError(f"no task of {', '.join(splits)} under {options} that run '{ctx.run}' has not met; "
                         f"choose another seed")  # fmt: skip
    return tasks, left_out


def reevaluate(ctx: RunContext, *, round_: int | None, options: dict[str, Any], splits: Sequence[str],
               max_tasks: int | None, root: Path, env: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Evaluate the policy after `round_` (None: the last update) on `splits` of environment `env` (None: the
    run's) with `options`; write the rows and the summary under `root/evaluations/`; return the summary."""
    from coevolve.agents.evaluation import evaluate_splits

    round_ = last_update(ctx) if round_ is None else round_
    if ctx.store.manifest(round_, "grpo_update") is None:
        raise ValueError(f"run '{ctx.run}' has no completed grpo_update in round {round_}")
    env = env or ctx.config.env.name
    tasks, left_out = fresh_tasks(ctx, env, options, splits, max_tasks)
    started = time.perf_counter()
    policy = ctx.use_policy(round_)
    sampling, limits = eval_settings(ctx.config, round_)
    samples = ctx.config.eval.samples
    artifacts, outputs = evaluate_splits(policy, lambda: envs.make(env, **options), tasks,
                                         sampling, limits, run=ctx.run, round_=round_, samples=samples,
                                         max_live=ctx.config.eval.max_live_episodes)  # fmt: skip
    measured = {**({"env": env} if env != ctx.config.env.name else {}), "options": options, "greedy": sampling.greedy, "temperature": sampling.temperature, "samples": samples}
    folder = root / "evaluations" / ctx.run / f"round={round_}-{content_hash(measured, length=12)}"
    for name, rows in artifacts.items():
        rows = [{**row, "run": ctx.run, "round": round_} for row in rows]
        write_table(to_table(rows, schema_for(name)), folder / f"{name}.parquet")
    summary = {"run": ctx.run, "round": round_, "policy_version": policy.version, "env": env,
               "options": options, "tasks": {split: len(t) for split, t in tasks.items()},
               "left_out_as_the_runs_own": left_out, "greedy": sampling.greedy,
               "samples": samples,
               "success": {split: outputs[f"{split}_success"] for split in tasks},
               "reward": {split: outputs[f"{split}_reward"] for split in tasks},
               "seconds": round(time.perf_counter() - started, 1), "folder": str(folder)}  # fmt: skip
    write_text_atomic(json.dumps(summary, indent=2) + "\n", folder / "evaluation.json")
    return summary
