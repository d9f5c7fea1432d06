"""Triples (step 4 of the loop): every explored tool call as (action, observation, exploration id), with
the environment's state digest before and after it.

The digests come from replaying the episode in a fresh environment from the task's initial state, with as
many user turns as the episode had (`exploration_task`; environments are deterministic): a reply with one
call is replayed as the reply text itself, so turn structure and step caps match the episode; a reply
with several calls is replayed one call per step to get a digest between them. If the replay stops
executing calls (a step cap hit by that splitting), the remaining digests are null. Triples are grouped
per exploration context (`group_id`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import Environment, Task
from coevolve.stages.explore.exploration import exploration_task, explored_tasks


def group_id(exploration_id: str) -> str:
    return content_hash([exploration_id, "group"])


def _replay_reply(env: Environment, reply: list[dict], live: bool) -> tuple[list[tuple], bool]:
    """Replay one reply; returns ((before, after) per call) and whether the replay still executes calls."""
    calls = [s for s in reply if s["kind"] == "call"]
    if len(calls) <= 1:
        before = env.state_digest() if live else None
        result = env.step(reply[0]["reply"])
        executed = len(result.info.get("calls", [])) == len(calls)
        live = live and executed
        return ([(before, env.state_digest() if live else None)] if calls else []), live
    digests = []
    for step in calls:
        before = env.state_digest() if live else None
        result = env.step([ToolCall(name=step["tool"], arguments=json.loads(step["arguments"] or "{}"))])
        live = live and len(result.info.get("calls", [])) == 1
        digests.append((before, env.state_digest() if live else None))
    return digests, live


def replay_triples(
    make_env: Callable[[], Environment],
    task: Task,
    steps: list[dict],
    *,
    exploration_id: str,
    trajectory_id: str,
) -> list[dict]:
    """Triple rows of one exploration episode (its `steps` rows), with replayed state digests."""
    ordered = sorted(steps, key=lambda s: (s["step"], s["call_index"]))
    turns = 1 + max((s["turn"] for s in ordered), default=0)
    env = make_env()
    rows, seq = [], 0
    try:
        env.reset(exploration_task(task, max(0, turns - len(task.turns))))
        live = True
        for _, group in itertools.groupby(ordered, key=lambda s: s["step"]):
            reply = list(group)
            digests, live = _replay_reply(env, reply, live)
            for step, (before, after) in zip([s for s in reply if s["kind"] == "call"], digests, strict=True):
                rows.append(
                    {
                        "triple_id": content_hash([trajectory_id, seq]),
                        "group_id": group_id(exploration_id),
                        "exploration_id": exploration_id,
                        "trajectory_id": trajectory_id,
                        "task_id": task.id,
                        "seq": seq,
                        "step": step["step"],
                        "call_index": step["call_index"],
                        "turn": step["turn"],
                        "tool": step["tool"],
                        "arguments": step["arguments"] or "{}",
                        "observation": step["observation"],
                        "ok": step["ok"],
                        "state_before": before,
                        "state_after": after,
                        "changed": None if before is None or after is None else before != after,
                    }
                )
                seq += 1
    finally:
        env.close()
    return rows


def build_triples(make_env: Callable[[], Environment], explorations: list[dict], steps: list[dict]) -> list[dict]:
    """Triples of every exploration episode (`explorations` rows, with their trajectory ids and explored task)."""
    tasks = explored_tasks(explorations)
    by_trajectory: dict[str, list[dict]] = {}
    for step in steps:
        by_trajectory.setdefault(step["trajectory_id"], []).append(step)
    rows = []
    for x in explorations:
        for trajectory_id in json.loads(x["trajectory_ids"]):
            calls = by_trajectory.get(trajectory_id, [])
            if any(s["kind"] == "call" for s in calls):
                rows += replay_triples(
                    make_env,
                    tasks[x["exploration_id"]],
                    calls,
                    exploration_id=x["exploration_id"],
                    trajectory_id=trajectory_id,
                )
    return rows
