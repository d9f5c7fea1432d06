"""The examples a teacher's warm start trains on (`stages.warm_start.build.teacher_checkpoint`): abstraction,
reflection and exploration replies for generated tasks whose reference solution is known, each under the
prompt the stage itself renders (`stages.abstract.stage`, `stages.explore.stage`). Each is (ids, loss mask).
With `warm_start.teacher_named_tool_examples` (an extension) also a reflection and an exploration on an
`unused` signal that names a training tool the task does not call (`named_tool_samples`).

    ids, mask = abstraction_sample(env, chat, task, max_tasks=2, distractors=1)
"""

from __future__ import annotations

import json
import random
from typing import Any

from coevolve.agents.reference import reference_sample
from coevolve.core import ToolCall
from coevolve.envs.base import Environment, Task
from coevolve.llm.chat import ChatFormat
from coevolve.stages.abstract.abstraction import Group, abstract_messages
from coevolve.stages.abstract.prompting import ABSTRACT_PREFIX
from coevolve.stages.explore.exploration import (
    ContextEnv,
    Target,
    exploration_task,
    explore_instructions,
    reflection_messages,
)
from coevolve.stages.explore.named_tool import app_listing, is_listing, takes_no_argument, with_named_tool
from coevolve.stages.explore.prompting import REFLECT_PREFIX


def abstraction_sample(env: Environment, chat: ChatFormat, task: Task, max_tasks: int, *,
                       distractors: int = 0, rng: random.Random | None = None) -> tuple[list[int], list[int]]:  # fmt: skip
    """The teacher's abstraction prompt (`stages.abstract.stage`) for `task`'s reference calls, as an exploration
    would have observed them, answered with the task itself: its calls, answers, user turns and family.
    Ids and loss mask, the reply prefilled with `ABSTRACT_PREFIX` like at inference (`EngineTeacher`).

    `distractors`: that many calls of offered tools that take no argument (reads such as `list_accounts`)
    observed at random places among the reference calls, and left out of the reply's solution: an
    exploration observes more than one task's calls, and the teacher must pick the ones its query asks for.
    """
    tools = env.reset(task).tools
    reference = [call for turn in task.solution or [] for call in turn]
    free = [t["function"]["name"] for t in tools if not t["function"]["parameters"].get("required")]
    plan: list[tuple[ToolCall, bool]] = [(call, True) for call in reference]
    rng = rng or random.Random(0)
    for _ in range(distractors if free else 0):
        plan.insert(rng.randrange(len(plan) + 1), (ToolCall(name=rng.choice(free), arguments={}), False))
    observed = _observe(env, [call for call, _ in plan])
    calls = [{"tool": call.name, "arguments": call.arguments, "observation": text}
             for (call, _), (_, text) in zip(plan, observed, strict=True)]  # fmt: skip
    solution = [i for i, (_, wanted) in enumerate(plan) if wanted]
    group = Group(group_id="warm-start", exploration_id="warm-start", task=task, calls=calls)
    answers = [str(value) for turn in task.checker.get("answers") or [] for value in turn]
    reply = json.dumps([{"solution": solution, "answers": answers, "query": " ".join(task.turns),
                         "intent": task.family.replace("_", " ")}])  # fmt: skip
    if not reply.startswith(ABSTRACT_PREFIX):
        raise AssertionError(f"the abstraction reply must start with {ABSTRACT_PREFIX!r}")
    prompt = chat.prompt_ids(abstract_messages(group, tools, max_tasks), tools=[]) + chat.encode(ABSTRACT_PREFIX)
    target = chat.encode(reply[len(ABSTRACT_PREFIX):]) + [chat.end_of_turn_id]
    return prompt + target, [0] * len(prompt) + [1] * len(target)


def reflection_sample(env: Environment, chat: ChatFormat, task: Task, *,
                      rng: random.Random | None = None) -> tuple[list[int], list[int]]:  # fmt: skip
    """The teacher's reflection prompt (`stages.explore.stage`) on a failed attempt at `task`, answered with a
    context the task's reference solution supports. Ids and loss mask, the reply prefilled with
    `REFLECT_PREFIX` like at inference.

    The attempt is the reference calls without the last one (nothing, for a one-call solution), marked by
    a boundary signal; the reply names the reference's tools, diagnoses the missing call and plans the
    calls in order. Trained on abstraction examples alone, a teacher can lose this reply's format: its
    reflections stop parsing, and it explores nothing."""
    rng = rng or random.Random(0)
    tools = env.reset(task).tools
    reference = [call for turn in task.solution or [] for call in turn]
    *done, missing = reference
    steps = []
    for i, (call, (ok, text)) in enumerate(zip(done, _observe(env, done), strict=True)):
        steps.append({"step": i, "call_index": 0, "kind": "call", "tool": call.name, "ok": ok,
                      "arguments": json.dumps(call.arguments), "observation": text})  # fmt: skip
    steps.append({"step": len(done), "call_index": 0, "kind": "answer", "reply": "Done."})
    successes = rng.randint(1, 7)
    evidence = json.dumps({"successes": successes, "failures": 8 - successes, "samples": 8}, separators=(",", ":"))
    reward = env.evaluate().reward
    target = Target("warm-start", task, "boundary", steps=steps, outcome=f"reward {reward:.2f}, failure",
                    evidence=evidence)  # fmt: skip
    reply = json.dumps(reference_context(task))
    if not reply.startswith(REFLECT_PREFIX):
        raise AssertionError(f"the reflection reply must start with {REFLECT_PREFIX!r}")
    prompt = chat.prompt_ids(reflection_messages(target, tools), tools=[]) + chat.encode(REFLECT_PREFIX)
    answer = chat.encode(reply[len(REFLECT_PREFIX):]) + [chat.end_of_turn_id]
    return prompt + answer, [0] * len(prompt) + [1] * len(answer)


def reference_context(task: Task) -> dict:
    """The exploration context a reflection on a failed attempt at `task` should reply with: the reference's
    tools, a diagnosis of the attempt that stopped before its last call, and a plan that calls them in
    order (`reflection_sample`'s reply, `exploration_sample`'s instructions)."""
    reference = [call for turn in task.solution or [] for call in turn]
    *done, missing = reference
    names = list(dict.fromkeys(call.name for call in reference))
    arguments = ", ".join(f"{k}={v}" for k, v in missing.arguments.items())
    diagnosis = (f"The agent stopped before calling {missing.name}({arguments}), so the task was left unfinished."
                 if done else f"The agent answered without calling {missing.name}, so nothing was done.")  # fmt: skip
    plan = (f"Call {', then '.join(names)} in this order with the values a user names, and vary the arguments "
            f"to see what each call returns and changes.")  # fmt: skip
    return {"tools": names, "apps": [], "diagnosis": diagnosis, "plan": plan}


def other_values(listing: Any, value: str) -> list[str]:
    """The values a JSON result shows where it shows `value`: the other strings of a list that holds it, and
    the same key's values in the other objects of a list where an object holds it under that key."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for item in node.values():
                walk(item)
        elif isinstance(node, list):
            if value in node:
                found.extend(x for x in node if isinstance(x, str) and x != value)
            objects = [item for item in node if isinstance(item, dict)]
            keys = {k for item in objects for k, v in item.items() if v == value}
            found.extend(item[k] for item in objects for k in sorted(keys)
                         if isinstance(item.get(k), str) and item[k] != value)  # fmt: skip
            for item in node:
                walk(item)

    walk(listing)
    return list(dict.fromkeys(found))


def explored_variant(env: Environment, task: Task, rng: random.Random) -> tuple[ToolCall, ToolCall] | None:
    """What an exploration beyond `task`'s request can do: a call of an offered tool that takes no argument
    (a listing such as `list_accounts`) and a reference call of `task` with one string argument replaced by
    another value that listing shows in the task's initial state (`other_values`); None when no listing
    shows another value for any reference argument."""
    tools = env.reset(task).tools
    free = [t["function"]["name"] for t in tools if not t["function"]["parameters"].get("required")]
    listings = []
    for name, (ok, text) in zip(free, _observe(env, [ToolCall(name=name) for name in free]), strict=True):
        try:
            listings.append((name, json.loads(text) if ok else None))
        except ValueError:
            continue
    reference = [call for turn in task.solution or [] for call in turn]
    strings = [(call, key, value) for call in reference for key, value in call.arguments.items()
               if isinstance(value, str)]  # fmt: skip
    for call, key, value in strings:
        for name, listing in listings:
            others = [v for v in other_values(listing, value) if v not in call.arguments.values()]
            if others:
                variant = ToolCall(name=call.name, arguments={**call.arguments, key: rng.choice(others)})
                return ToolCall(name=name), variant
    return None


def exploration_sample(env: Environment, chat: ChatFormat, task: Task, *,
                       rng: random.Random | None = None) -> tuple[list[int], list[int]] | None:  # fmt: skip
    """The teacher's exploration episode (`stages.explore.stage`) on `task`, under the context its reflection
    example plans (`reference_context`), acted out: the reference solution for the task's own turns, then
    in the follow-up turn a listing and a reference call with another value it shows (`explored_variant`).
    Ids and loss mask like `agents.reference.reference_sample`. A teacher that only learned to solve tasks
    tends to repeat the task's own calls in the follow-up, or to name values nothing showed.
    None when the task has no such variant."""
    variant = explored_variant(env, task, rng or random.Random(0))
    if variant is None:
        return None
    solution = list(task.solution or [])
    solution += [[] for _ in range(len(task.turns) - len(solution))]
    episode = exploration_task(task, 1).model_copy(update={"solution": [*solution, list(variant)]})
    instructions = {task.id: explore_instructions({**reference_context(task), "unknown_tools": []})}
    return reference_sample(ContextEnv(env, instructions), chat, episode)


def unused_training_call(env: Environment, task: Task, trained: dict[str, ToolCall],
                         rng: random.Random) -> tuple[ToolCall, ToolCall] | None:  # fmt: skip
    """(a listing, a call of a training tool) that an exploration of `task` can make: the tool is offered,
    takes arguments, is not in the task's reference, and is one of `trained` (tool -> a reference call of it
    in another training task: only tools some training task calls, so never a coverage-gap tool); its
    listing is the app's argument-free one (`named_tool.app_listing`). Each required argument takes a value
    the listing shows under the argument's name, else the other task's value; the pair must run from the
    task's initial state. None when no offered tool qualifies."""
    tools = env.reset(task).tools
    used = {call.name for turn in task.solution or [] for call in turn}
    names = [t["function"]["name"] for t in tools if t["function"]["name"] in trained
             and t["function"]["name"] not in used and not takes_no_argument(t) and not is_listing(t)]  # fmt: skip
    for name in rng.sample(names, len(names)):
        listing = app_listing(tools, name)
        if listing is None:
            continue
        env.reset(task)
        ok, text = _observe(env, [ToolCall(name=listing)])[0]
        try:
            shown = json.loads(text) if ok else None
        except ValueError:
            shown = None
        required = next(t for t in tools if t["function"]["name"] == name)["function"]["parameters"]["required"]
        arguments = {key: _shown_value(shown, key, rng, trained[name].arguments.get(key)) for key in required}
        call = ToolCall(name=name, arguments=arguments)
        env.reset(task)
        if all(ran for ran, _ in _observe(env, [ToolCall(name=listing), call])):
            return ToolCall(name=listing), call
    return None


def _shown_value(shown: Any, key: str, rng: random.Random, fallback: Any) -> Any:
    """A value a listing shows under `key` (objects of a list, or of a list under any key), else `fallback`."""
    rows = shown if isinstance(shown, list) else []
    if isinstance(shown, dict):
        rows = [row for value in shown.values() if isinstance(value, list) for row in value]
    values = [row[key] for row in rows if isinstance(row, dict) and row.get(key) is not None]
    return rng.choice(values) if values else fallback


def named_tool_context(tools: list[dict], listing: ToolCall, call: ToolCall) -> dict:
    """The exploration context of an `unused` signal naming `call`'s tool, as a reflection should write it,
    with its schema and listing (`explore.named_tool_context`)."""
    context = {"tools": [call.name, listing.name], "apps": [],
               "diagnosis": f"No attempt in the last rounds called {call.name}, so the agent never practised it.",
               "plan": f"Call {listing.name} to see which values exist, then call {call.name} with values it "
                       "shows and observe what it returns and changes."}  # fmt: skip
    return with_named_tool({**context, "unknown_tools": []}, tools, call.name)


def named_tool_samples(env: Environment, chat: ChatFormat, task: Task, trained: dict[str, ToolCall], *,
                       rng: random.Random) -> list[tuple[list[int], list[int]]]:  # fmt: skip
    """A reflection and an exploration on an `unused` signal naming a training tool `task` does not call
    (`unused_training_call`): the reflection, on the task's reference attempt, replies with a context naming
    the tool and its listing; the exploration runs the reference for the request, then in the follow-up
    turn the listing and the tool with values it shows. Empty when no offered tool qualifies."""
    found = unused_training_call(env, task, trained, rng)
    if found is None:
        return []
    listing, call = found
    tools = env.reset(task).tools
    reference = [c for turn in task.solution or [] for c in turn]
    steps = [{"step": i, "call_index": 0, "kind": "call", "tool": c.name, "ok": ok,
              "arguments": json.dumps(c.arguments), "observation": text}
             for i, (c, (ok, text)) in enumerate(zip(reference, _observe(env, reference), strict=True))]  # fmt: skip
    steps.append({"step": len(reference), "call_index": 0, "kind": "answer", "reply": "Done."})
    evidence = json.dumps({"tool": call.name, "offered_trajectories": 8, "offered_tasks": 1, "window_calls": 0,
                           "first_round": 0}, separators=(",", ":"))  # fmt: skip
    target = Target("warm-start", task, "unused", steps=steps, outcome=f"reward {env.evaluate().reward:.2f}",
                    evidence=evidence, named_tool=call.name)  # fmt: skip
    context = named_tool_context(tools, listing, call)
    reply = json.dumps({k: context[k] for k in ("tools", "apps", "diagnosis", "plan")})
    prompt = chat.prompt_ids(reflection_messages(target, tools), tools=[]) + chat.encode(REFLECT_PREFIX)
    answer = chat.encode(reply[len(REFLECT_PREFIX):]) + [chat.end_of_turn_id]
    solution = list(task.solution or [])
    solution += [[] for _ in range(len(task.turns) - len(solution))]
    episode = exploration_task(task, 1).model_copy(update={"solution": [*solution, [listing, call]]})
    explored = reference_sample(ContextEnv(env, {task.id: explore_instructions(context)}), chat, episode)
    return [(prompt + answer, [0] * len(prompt) + [1] * len(answer)), explored]


def _observe(env: Environment, calls: list[ToolCall]) -> list[tuple[bool, str]]:
    """Run `calls` in order in one step (a turn's step limit would cut a long list of one-call steps);
    per call, whether it ran and its result or error as text."""
    if not calls:
        return []
    ran = env.step(list(calls)).info.get("calls", [])
    if len(ran) != len(calls):
        raise RuntimeError(f"the environment ran {len(ran)} of {len(calls)} calls in one step")

    def text(record: dict) -> str:
        observation = record.get("result") if record.get("ok") else record.get("error")
        return observation if isinstance(observation, str) else json.dumps(observation, default=str)

    return [(bool(record.get("ok")), text(record)) for record in ran]
