"""Evaluate a run's policy on tasks it never met: the environment's splits under other options (another
seed draws tasks no run of this project used), or another environment's (the paper's transfer row: trained
on one, tested on another), none of the run's own tasks or its warm start's, nothing written into the run.

    coevolve eval --run learning-grpo-s0 --env-seed 9001 --split validation
    coevolve eval --run demo --env bfcl --split test --max-tasks 20      # tool world -> BFCL

    coevolve eval --run demo --env-seed 9001 --round 0 --baseline     # round 0 vs the initial policy

The evaluation is the `evaluate` stage's (`stages.evaluate.stage.eval_settings`: greedy by default, the run's
reply and token limits) with the policy after `round` (default: the run's last update); `baseline` also
scores the initial policy (the base model, always at hand) on the same tasks, once per task set. Each goes to
its own folder, `<root>/evaluations/run=<run>/round=<r>/stage=eval-<tasks key>/` (round -1: the initial
policy), beside the runs and never into one: the `evaluations` artifact (one row per split, the catalog's
view of that name, `coevolve runs`, the web view's run page), the rows (`evals`, `trajectories`, `steps`,
the run's schemas; read them with DuckDB's `read_parquet`) and `evaluation.json`. The tasks key hashes
what decides the tasks and how they are scored, never the round, so a round and its baseline share it.
A round whose checkpoint `train.keep_checkpoints` pruned cannot be scored: `PrunedCheckpointError`
says so and names the baseline.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coevolve import envs
from coevolve.core import content_hash
from coevolve.pipeline.context import RunContext
from coevolve.stages.evaluate.stage import eval_sample, eval_settings
from coevolve.stages.warm_start.adapters import RECORD
from coevolve.storage.catalog import EVALUATIONS_FOLDER
from coevolve.storage.parquet import to_table, write_table, write_text_atomic
from coevolve.storage.schemas import schema_for

BASE_ROUND = -1
"""The round the initial policy (the base model) is filed under, as `RunContext.policy_after` numbers it."""
PROGRESS_LINES = 10
"""About this many progress lines per policy scored (one per tenth of its episodes)."""


class PrunedCheckpointError(ValueError):
    """The round's checkpoint was pruned (`train.keep_checkpoints`): its policy cannot be scored again."""


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


def evaluation_folder(root: Path, run: str, round_: int, key: str) -> Path:
    return root / EVALUATIONS_FOLDER / f"run={run}" / f"round={round_}" / f"stage=eval-{key}"


def pruned_message(ctx: RunContext, round_: int) -> str | None:
    """One line when the policy after `round_` has no checkpoint left (pruned), else None."""
    version, checkpoint = ctx.policy_after(round_)
    if checkpoint is None or checkpoint.is_dir():
        return None
    base = ctx.policy_after(BASE_ROUND)[0]
    return (f"round {round_}'s checkpoint ({version}) was pruned (train.keep_checkpoints), so its policy cannot "
            f"be scored; --baseline scores the initial policy ({base}) on the same fresh tasks")


def reevaluate(ctx: RunContext, *, round_: int | None, options: dict[str, Any], splits: Sequence[str],
               max_tasks: int | None, root: Path, env: str | None = None, baseline: bool = False,
               report: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Score the policy after `round_` (None: the last update) on fresh tasks of `splits` of environment `env`
    (None: the run's) made with `options`, and with `baseline` the initial policy on the same tasks (once:
    a stored baseline is read back). Returns {"round": its summary, or None when `baseline` stands in for a
    pruned checkpoint, "baseline": the initial policy's summary when stored or asked for, "pruned": the
    line saying the round's checkpoint is gone, or None}. `report` gets the progress lines."""
    round_ = last_update(ctx) if round_ is None else round_
    if ctx.store.manifest(round_, "grpo_update") is None:
        raise ValueError(f"run '{ctx.run}' has no completed grpo_update in round {round_}")
    pruned = pruned_message(ctx, round_)
    if pruned and not baseline:
        raise PrunedCheckpointError(pruned)
    env = env or ctx.config.env.name
    tasks, left_out = fresh_tasks(ctx, env, options, splits, max_tasks)
    sampling, _ = eval_settings(ctx.config, round_)
    scoring = {**({"env": env} if env != ctx.config.env.name else {}), "options": options,
               "greedy": sampling.greedy, "temperature": sampling.temperature, "samples": ctx.config.eval.samples,
               "tasks": {split: [task.id for task in split_tasks] for split, split_tasks in tasks.items()}}  # fmt: skip
    key = content_hash(scoring, length=12)
    scored = None if pruned else _score(ctx, round_, env, options, tasks, key, root, left_out, report)
    base_folder = evaluation_folder(root, ctx.run, BASE_ROUND, key)
    if baseline and not (base_folder / "evaluation.json").is_file():
        _score(ctx, BASE_ROUND, env, options, tasks, key, root, left_out, report)
    stored = base_folder / "evaluation.json"
    return {"round": scored, "pruned": pruned,
            "baseline": json.loads(stored.read_text()) if stored.is_file() else None}


def _score(ctx: RunContext, round_: int, env: str, options: dict[str, Any], tasks: dict[str, list], key: str,
           root: Path, left_out: int, report: Callable[[str], None] | None) -> dict[str, Any]:  # fmt: skip
    """Score the policy after `round_` on `tasks`; write its folder; its summary."""
    from coevolve.agents.evaluation import evaluate_splits

    started = time.perf_counter()
    who = "initial policy" if round_ == BASE_ROUND else f"policy after round {round_}"
    samples = ctx.config.eval.samples
    episodes = sum(map(len, tasks.values())) * samples
    if report:
        report(f"eval {who}: {episodes} episodes on fresh tasks of {', '.join(tasks)} ({env}); loading it")
    policy = ctx.use_policy(round_)
    sampling, limits = eval_settings(ctx.config, max(round_, 0))
    progress = _progress_lines(who, episodes, started, report)
    artifacts, outputs = evaluate_splits(policy, lambda: envs.make(env, **options), tasks,
                                         sampling, limits, run=ctx.run, round_=round_, samples=samples,
                                         max_live=ctx.config.eval.max_live_episodes, progress=progress)  # fmt: skip
    folder = evaluation_folder(root, ctx.run, round_, key)
    artifacts["evaluations"] = [
        {"env": env, "env_options": json.dumps(options, sort_keys=True), "env_seed": options.get("seed"),
         "split": split, "tasks_key": key, "tasks": len(split_tasks), "episodes": len(split_tasks) * samples,
         "policy_version": policy.version, "greedy": sampling.greedy, "samples": samples,
         "success": outputs[f"{split}_success"], "reward": outputs[f"{split}_reward"]}
        for split, split_tasks in tasks.items()
    ]  # fmt: skip
    for name, rows in artifacts.items():
        rows = [{**row, "run": ctx.run, "round": round_} for row in rows]
        write_table(to_table(rows, schema_for(name)), folder / f"{name}.parquet")
    summary = {"run": ctx.run, "round": round_, "policy_version": policy.version, "env": env,
               "options": options, "tasks": {split: len(t) for split, t in tasks.items()},
               "left_out_as_the_runs_own": left_out, "greedy": sampling.greedy, "samples": samples,
               "success": {split: outputs[f"{split}_success"] for split in tasks},
               "reward": {split: outputs[f"{split}_reward"] for split in tasks}, "tasks_key": key,
               "seconds": round(time.perf_counter() - started, 1), "folder": str(folder)}  # fmt: skip
    write_text_atomic(json.dumps(summary, indent=2) + "\n", folder / "evaluation.json")
    return summary


def _progress_lines(who: str, episodes: int, started: float,
                    report: Callable[[str], None] | None) -> Callable[[int], None] | None:  # fmt: skip
    """A `progress` callback that reports `who`'s finished episodes about `PROGRESS_LINES` times."""
    if report is None:
        return None
    every, done = max(1, math.ceil(episodes / PROGRESS_LINES)), 0

    def advance(count: int) -> None:
        nonlocal done
        before, done = done, done + count
        if done // every > before // every or done == episodes:
            report(f"eval {who}: {done}/{episodes} episodes, {time.perf_counter() - started:.0f} s")

    return advance
