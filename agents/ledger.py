"""Turn finished episodes into ledger rows: `trajectories`, `steps` and training `samples`.

A trajectory id is a content hash of where the episode ran (run, round, source, task, sample, policy
version) and of what it was (`EPISODE_COLUMNS`: its messages, how it ended, its reward), so an identical
re-run reproduces the same ids and later joins keep working, while a re-run that changes an episode (another
`rollout.max_new_tokens`, another model) gives it a new id: a signal, triple or task that names the old one
never resolves to the new episode. `trajectory_id` derives it from the ledger row alone (`coevolve fork`
re-derives ids for another run that way).
"""

from __future__ import annotations

import json

from coevolve.agents.episodes import Episode
from coevolve.core import content_hash

EPISODE_COLUMNS = ("messages", "finish", "error", "reward", "success")
"""The columns of a `trajectories` row that say what the episode was; its id hashes them."""


def trajectory_id(run: str, round_: int, row: dict) -> str:
    """The id of the `trajectories` row `row` (its `source`, `task_id`, `sample`, `policy_version` and
    `EPISODE_COLUMNS`) in round `round_` of run `run`."""
    where = [run, round_, row["source"], row["task_id"], row["sample"], row["policy_version"]]
    return content_hash([*where, *(row[c] for c in EPISODE_COLUMNS)])


def group_id(run: str, round_: int, source: str, task_id: str) -> str:
    return content_hash([run, round_, source, task_id, "group"])


def trajectory_rows(episodes: list[Episode], *, run: str, round_: int, source: str, policy: str) -> list[dict]:
    rows = []
    for ep in episodes:
        evaluation = ep.evaluation
        row = {
            "source": source, "task_id": ep.task.id, "group_id": group_id(run, round_, source, ep.task.id),
            "sample": ep.sample, "policy_version": policy,
            "reward": float(evaluation.reward), "success": bool(evaluation.success),
            "finish": ep.finish, "error": ep.error, "num_turns": ep.turn, "num_steps": ep.replies,
            "num_tool_calls": sum(s["kind"] == "call" for s in ep.steps),
            "num_tool_errors": sum(not s["ok"] for s in ep.steps),
            "prompt_tokens": ep.prompt_tokens, "completion_tokens": ep.completion_tokens,
            "messages": json.dumps(ep.messages), "eval_details": json.dumps(evaluation.details, default=str),
        }
        rows.append({"trajectory_id": trajectory_id(run, round_, row), **row})
    return rows


def step_rows(episodes: list[Episode], trajectories: list[dict]) -> list[dict]:
    return [
        {**step, "trajectory_id": traj["trajectory_id"], "source": traj["source"], "task_id": traj["task_id"]}
        for ep, traj in zip(episodes, trajectories, strict=True)
        for step in ep.steps
    ]


def sample_rows(episodes: list[Episode], trajectories: list[dict]) -> list[dict]:
    """Training samples; episodes that failed to start (no tokens) are left out of training."""
    rows = []
    for ep, traj in zip(episodes, trajectories, strict=True):
        if not ep.input_ids:
            continue
        rows.append({
            "sample_id": traj["trajectory_id"], "trajectory_id": traj["trajectory_id"],
            "task_id": traj["task_id"], "group_id": traj["group_id"],
            "policy_version": traj["policy_version"], "reward": traj["reward"],
            "input_ids": ep.input_ids, "loss_mask": ep.loss_mask, "logprobs": ep.logprobs,
            "num_tokens": len(ep.input_ids), "num_policy_tokens": ep.completion_tokens,
        })
    return rows
