"""rollout: K episodes for each of `rollout.tasks_per_round` tasks drawn from D_r, with the current policy.

Reads the dataset version of round r and the policy after round r-1 (after round r-1-s with
`rollout.max_staleness` s > 0: its version is in the cache key and the manifest's outputs name it and its
checkpoint); writes `trajectories` (source `rollout`), `steps` and `samples` (exact sampled token ids, loss
mask, sampler log-probs, reward) that grpo_update trains on.

    coevolve stage rollout --run demo --round 1
"""

from __future__ import annotations

import random
import time

from coevolve.agents.episodes import Episode, EpisodeLimits, run_episodes
from coevolve.agents.ledger import sample_rows, step_rows, trajectory_rows
from coevolve.core import round_seed
from coevolve.envs.base import Task
from coevolve.llm.engine import SamplingParams
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Dataset, Inputs, Policy, StageDef, StageResult
from coevolve.rl.rollout_metrics import rollout_figures
from coevolve.storage.datasets import sample_task_ids


def check_single_version(episodes: list[Episode], expected: str, round_: int) -> None:
    """Every sample of a round comes from the one policy version its key names (the one being trained, or
    the stale one `rollout.max_staleness` picks)."""
    versions = set().union(*(ep.versions for ep in episodes)) if episodes else set()
    if versions - {expected}:
        raise RuntimeError(
            f"rollout of round {round_}: samples came from policy versions {sorted(versions)}, expected only "
            f"{expected!r} (the inference engine changed weights during the rollout); re-run the stage"
        )


def roll_out(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    cfg = ctx.config.rollout
    seed = round_seed(ctx.config.run.seed, round_, "rollout")
    dataset = inputs["dataset"]
    task_ids = sample_task_ids(dataset.table, cfg.tasks_per_round, random.Random(seed), newest_share=cfg.newest_share)
    tasks = [Task.from_row(row) for row in dataset.task_rows(task_ids)]
    policy = inputs["policy"]
    jobs = [(task, k) for task in tasks for k in range(cfg.k)]
    sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                              seed=seed)
    limits = EpisodeLimits(cfg.max_replies, cfg.max_context_tokens)
    started = time.perf_counter()
    with ctx.progress(f"round {round_} rollout", len(jobs)) as advance:
        episodes = run_episodes(policy.engine, policy.chat, ctx.make_env, jobs, sampling, limits,
                                seed=seed, progress=advance)
    seconds = time.perf_counter() - started
    check_single_version(episodes, policy.version, round_)
    trajectories = trajectory_rows(episodes, run=ctx.run, round_=round_, source="rollout", policy=policy.version)
    generated = sum(ep.completion_tokens for ep in episodes)
    steps = step_rows(episodes, trajectories)
    outputs = {
        "episodes": len(episodes),
        "success_rate": sum(t["success"] for t in trajectories) / max(len(trajectories), 1),
        "mean_reward": sum(t["reward"] for t in trajectories) / max(len(trajectories), 1),
        "generated_tokens": generated, "seconds": round(seconds, 3),
        "tokens_per_second": round(generated / seconds, 2) if seconds > 0 else 0.0,
        **rollout_figures(trajectories, steps),  # TRL's figures of a generation batch
        **sampled_with(ctx, round_),
    }
    return StageResult(
        {"trajectories": trajectories, "steps": steps,
         "samples": sample_rows(episodes, trajectories)},
        outputs,
    )


def sampled_with(ctx: StageContext, round_: int) -> dict[str, object]:
    """With `rollout.max_staleness` > 0, the policy the samples came from: the round whose update made it
    (-1: the base weights), its version and its checkpoint (relative to the run), and the staleness in
    rounds (the number of updates between it and the policy being trained)."""
    if not ctx.config.rollout.max_staleness:
        return {}
    policy_round = POLICY.policy_round(ctx, round_)
    version, checkpoint = ctx.policy_after(policy_round)
    where = None if checkpoint is None else str(checkpoint.relative_to(ctx.store.layout.run_dir))
    return {"policy_round": policy_round, "policy_version": version, "policy_checkpoint": where,
            "staleness": round_ - 1 - policy_round}


POLICY = Policy(after_round=-1, staleness="rollout.max_staleness")
"""The policy after round r-1, or r-1-s with `rollout.max_staleness` s (in a model of its own)."""

ROLLOUT = StageDef(
    "rollout", 1,
    config=("rollout", "env", "model", "run.seed"),
    reads={"dataset": Dataset(), "policy": POLICY},
    compute=roll_out,
)
