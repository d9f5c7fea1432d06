"""evaluate / baseline: score a policy on held-out splits the dataset never contains.

`evaluate` in round r scores the policy after round r's update (every `eval.every` rounds); `baseline`
in round 0 scores the initial policy, so a run's curve starts at zero-shot. One episode per task, greedy
by default. Writes `evals` (per task reward and success) plus `trajectories`/`steps` with source `eval`.
"""

from __future__ import annotations

import random

from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.agents.ledger import step_rows, trajectory_rows
from coevolve.llm.engine import SamplingParams
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageDef, StageResult

from coevolve.core import round_seed


def eval_tasks(ctx: RunContext, split: str):
    tasks = ctx.env_tasks(split)
    limit = ctx.config.eval.max_tasks
    if limit is not None and limit < len(tasks):
        tasks = random.Random(f"eval-{split}").sample(tasks, limit)  # the same tasks every round
    return tasks


def evaluate_policy(ctx: RunContext, round_: int, policy_round: int) -> StageResult:
    cfg, rollout = ctx.config.eval, ctx.config.rollout
    policy = ctx.use_policy(policy_round)
    temperature = 1.0 if cfg.greedy else rollout.temperature
    sampling = SamplingParams(temperature=temperature, max_new_tokens=rollout.max_new_tokens,
                              greedy=cfg.greedy, seed=round_seed(ctx.config.run.seed, round_, "eval"))
    limits = EpisodeLimits(rollout.max_replies, rollout.max_context_tokens)
    evals, trajectories, steps, outputs = [], [], [], {}
    tasks = {split: eval_tasks(ctx, split) for split in cfg.splits}
    jobs = [(task, 0) for split in cfg.splits for task in tasks[split]]  # one batch: the engine fills it better
    with ctx.progress(f"round {round_} eval {', '.join(cfg.splits)}", len(jobs)) as advance:
        all_episodes = run_episodes(policy.engine, policy.chat, ctx.make_env, jobs, sampling, limits,
                                    progress=advance)  # fmt: skip
    start = 0
    for split in cfg.splits:
        episodes, start = all_episodes[start:start + len(tasks[split])], start + len(tasks[split])
        rows = trajectory_rows(episodes, run=ctx.run, round_=round_, source=f"eval:{split}",
                               policy=policy.version)
        trajectories += rows
        steps += step_rows(episodes, rows)
        evals += [
            {"split": split, "task_id": ep.task.id, "family": ep.task.family, "trajectory_id": row["trajectory_id"],
             "policy_version": policy.version, "greedy": cfg.greedy, "reward": row["reward"],
             "success": row["success"]}
            for ep, row in zip(episodes, rows, strict=True)
        ]
        outputs[f"{split}_success"] = sum(r["success"] for r in rows) / max(len(rows), 1)
        outputs[f"{split}_reward"] = sum(r["reward"] for r in rows) / max(len(rows), 1)
    outputs["policy_version"] = policy.version
    return StageResult({"evals": evals, "trajectories": trajectories, "steps": steps}, outputs)


def _policy_of_round(ctx: RunContext, round_: int) -> dict[str, str]:
    return {"policy": ctx.policy_after(round_)[0]}


def _base_policy(ctx: RunContext, round_: int) -> dict[str, str]:
    return {"policy": ctx.policy_after(-1)[0]}


_SECTIONS = ("eval", "env", "model", "rollout", "run")
EVALUATE = StageDef("evaluate", 1, _SECTIONS, _policy_of_round, lambda ctx, r, key: evaluate_policy(ctx, r, r))
BASELINE = StageDef("baseline", 1, _SECTIONS, _base_policy, lambda ctx, r, key: evaluate_policy(ctx, r, -1))
