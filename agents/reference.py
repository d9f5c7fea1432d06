"""Reference episodes: a task's reference solution played through the environment as the agent would.

Rendered exactly as a rollout is (`agents.episodes`): the prompt with tools and demonstrations, then per
user turn one reply per reference call (so each call sees the previous result) and a final answer stating
the turn's required values (`envs.replay.final_answer`). Only the assistant replies carry loss. The
supervised warm start (`rl.warm_start`) trains on them.

    rows = [reference_sample(env, chat, task) for task in tasks]      # (ids, loss mask) per task
"""

from __future__ import annotations

from collections.abc import Sequence

from coevolve.envs.base import Environment, Task
from coevolve.envs.replay import final_answer
from coevolve.llm.chat import ChatFormat
from coevolve.llm.toolcalls import render_tool_call
from coevolve.rl.batch import SampleBatch
from coevolve.rl.warm_start import as_batch


def reference_sample(env: Environment, chat: ChatFormat, task: Task) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of `task`'s reference solution played through `env` as the agent."""
    obs = env.reset(task)
    ids = chat.prompt_ids(obs.messages, tools=obs.tools, demonstrations=env.demonstrations())
    mask = [0] * len(ids)
    solution = task.solution or []
    for turn in range(len(task.turns)):
        calls = solution[turn] if turn < len(solution) else []
        for reply in [render_tool_call(call) for call in calls] + [final_answer(task, turn)]:
            reply_ids = chat.encode(reply) + [chat.end_of_turn_id]
            ids += reply_ids
            mask += [1] * len(reply_ids)
            result = env.step(reply)
            if result.done:
                return ids, mask
            more = chat.continuation_ids(result.messages, last_token_id=chat.end_of_turn_id).ids
            ids += more
            mask += [0] * len(more)
    return ids, mask


def reference_samples(env: Environment, chat: ChatFormat, tasks: Sequence[Task]) -> SampleBatch:
    """One reference episode per task, as a `SampleBatch` (rewards 1); a group is one task family.

    Tasks of one family share their prompt up to the user's request (same tools, same demonstrations),
    so `warm_start` runs a family's rows together and encodes that prefix once (`rl.shared_prefix`).
    """
    return as_batch([reference_sample(env, chat, task) for task in tasks], [task.family for task in tasks])
