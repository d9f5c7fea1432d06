"""Score a policy on held-out tasks: `samples` episodes per task (one by default), rows for `evals`,
`trajectories` and `steps`.

Used by the `baseline` (the initial policy, round 0) and `evaluate` (the policy after a round's update)
stages. All splits go to the engine as one batch of episodes, which it fills better than one per split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.agents.ledger import step_rows, trajectory_rows
from coevolve.envs.base import Environment, Task
from coevolve.llm.engine import SamplingParams


def evaluate_splits(
    policy: Any,
    make_env: Callable[[], Environment],
    tasks: dict[str, list[Task]],
    sampling: SamplingParams,
    limits: EpisodeLimits,
    *,
    run: str,
    round_: int,
    samples: int = 1,
    max_live: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, list[dict]], dict[str, Any]]:
    """(artifacts `evals`, one row per episode, `trajectories` with source `eval:<split>` and the episode's
    `sample`, `steps`; outputs `<split>_success` and `<split>_reward`, means over episodes, which are means
    over tasks as every task has `samples` of them) of every task of every split."""
    jobs = [(task, sample) for split_tasks in tasks.values() for task in split_tasks for sample in range(samples)]
    episodes = run_episodes(policy.engine, policy.chat, make_env, jobs, sampling, limits, max_live=max_live,
                            progress=progress)
    artifacts: dict[str, list[dict]] = {"evals": [], "trajectories": [], "steps": []}
    outputs: dict[str, Any] = {}
    start = 0
    for split, split_tasks in tasks.items():
        count = len(split_tasks) * samples
        done, start = episodes[start:start + count], start + count
        rows = trajectory_rows(done, run=run, round_=round_, source=f"eval:{split}", policy=policy.version)
        artifacts["trajectories"] += rows
        artifacts["steps"] += step_rows(done, rows)
        artifacts["evals"] += [
            {"split": split, "task_id": ep.task.id, "family": ep.task.family, "trajectory_id": row["trajectory_id"],
             "policy_version": policy.version, "greedy": sampling.greedy, "reward": row["reward"],
             "success": row["success"]}
            for ep, row in zip(done, rows, strict=True)
        ]
        outputs[f"{split}_success"] = sum(r["success"] for r in rows) / max(len(rows), 1)
        outputs[f"{split}_reward"] = sum(r["reward"] for r in rows) / max(len(rows), 1)
    outputs["policy_version"] = policy.version
    return artifacts, outputs
