"""Verdict parity of `BfclEnv` with bfcl-eval's own `multi_turn_checker` on ground truths and perturbations.

Every variant is played through our environment (one `step` per decoded step, then "Done." per turn) and
its decoded calls are scored by the official checker (unique model name per call, cache keys deleted);
the two verdicts must be identical. The full sweep (all tasks, every category) is `slow`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.bfcl import data
from coevolve.envs.bfcl.official import official_check

Steps = list[list[list[ToolCall]]]
"""Decoded steps (lists of calls) per turn."""


def _turns(task: Task) -> list[list[ToolCall]]:
    return [list(turn) for turn in task.solution or []]


def _as_steps(turns: list[list[ToolCall]]) -> Steps:
    return [[turn] if turn else [] for turn in turns]


def _pick_call(turns: list[list[ToolCall]], rng: random.Random) -> tuple[int, int] | None:
    spots = [(t, i) for t, turn in enumerate(turns) for i in range(len(turn))]
    return rng.choice(spots) if spots else None


def _changed(value):
    """A different value of the same type, or None when there is no obvious one."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "_x" if value else "x"
    if isinstance(value, list) and value:
        return value[:-1]
    return None


def truth(task, rng):
    return _as_steps(_turns(task))


def two_steps_per_turn(task, rng):
    halves = [(turn[: len(turn) // 2], turn[len(turn) // 2 :]) for turn in _turns(task)]
    return [[half for half in pair if half] for pair in halves]


def dropped_call(task, rng):
    turns = _turns(task)
    t, i = _pick_call(turns, rng)
    del turns[t][i]
    return _as_steps(turns)


def changed_argument(task, rng):
    turns = _turns(task)
    spots = [
        (t, i, k)
        for t, turn in enumerate(turns)
        for i, call in enumerate(turn)
        for k, v in call.arguments.items()
        if _changed(v) is not None
    ]
    if not spots:
        return None
    t, i, key = rng.choice(spots)
    call = turns[t][i]
    turns[t][i] = ToolCall(name=call.name, arguments={**call.arguments, key: _changed(call.arguments[key])})
    return _as_steps(turns)


def extra_call(task, rng):
    turns = _turns(task)
    t, i = _pick_call(turns, rng)
    turns[t].insert(i + 1, turns[t][i])
    return _as_steps(turns)


def moved_call(task, rng):
    turns = _turns(task)
    if len(turns) < 2:
        return None
    t, i = _pick_call(turns, rng)
    target = rng.choice([u for u in range(len(turns)) if u != t])
    call = turns[t].pop(i)
    turns[target].insert(len(turns[target]) if target > t else 0, call)
    return _as_steps(turns)


def empty_turn(task, rng):
    turns = _turns(task)
    t = rng.choice([t for t, turn in enumerate(turns) if turn])
    turns[t] = []
    return _as_steps(turns)


def stray_unknown_call(task, rng):
    """An unknown tool in a ground-truth step: an error result for both, and no change of verdict."""
    turns = _turns(task)
    t, i = _pick_call(turns, rng)
    turns[t].insert(i, ToolCall(name="no_such_tool", arguments={"x": 1}))
    return _as_steps(turns)


VARIANTS: dict[str, Callable[[Task, random.Random], Steps | None]] = {
    f.__name__: f
    for f in (
        truth,
        two_steps_per_turn,
        stray_unknown_call,
        dropped_call,
        changed_argument,
        extra_call,
        moved_call,
        empty_turn,
    )
}
UNCHANGED = ("truth", "two_steps_per_turn", "stray_unknown_call")
PERTURBED = [name for name in VARIANTS if name not in UNCHANGED]


def play(env, task: Task, steps: Steps) -> tuple[bool, Steps]:
    """Drive the environment as an agent emitting these decoded steps; returns the verdict and the steps
    actually taken (a turn's 21st step force-quits the task, as in the harness)."""
    env.reset(task)
    taken: Steps = []
    for turn in steps:
        taken.append([])
        for step in turn:
            taken[-1].append(step)
            if env.step(step).done:
                return env.evaluate().success, taken
        env.step("Done.")
    return env.evaluate().success, taken


def compare(category: str, tasks: list[Task], repeats: int) -> tuple[int, Counter, list]:
    """Play every variant of every task both ways; returns (comparisons, failures per kind, mismatches)."""
    entries = {e["id"]: e for e in data.load_entries(category)}
    env = envs.make("bfcl", category=category)
    count, failures, mismatches = 0, Counter(), []
    for task in tasks:
        bfcl_id = task.lineage["bfcl_id"]
        rng = random.Random(bfcl_id)
        for kind, make in VARIANTS.items():
            for _ in range(1 if kind in UNCHANGED else repeats):
                steps = make(task, rng)
                if steps is None:
                    continue
                ours, taken = play(env, task, steps)
                decoded = [[[data.call_string(c) for c in step] for step in turn] for turn in taken]
                official = official_check(entries[bfcl_id], decoded, task.checker["ground_truth"])["valid"]
                count += 1
                failures[kind] += not ours
                if ours != official:
                    mismatches.append((bfcl_id, kind, ours, official, decoded))
    return count, failures, mismatches


def test_parity_on_a_sample_of_base_tasks():
    tasks = envs.make("bfcl").tasks("all")[::10]
    count, failures, mismatches = compare("multi_turn_base", tasks, repeats=1)
    assert mismatches == []
    assert count >= 20 * 6
    assert failures["truth"] == failures["two_steps_per_turn"] == failures["stray_unknown_call"] == 0
    assert failures["empty_turn"] == 20  # a checked turn without a decoded step always fails
    assert failures["dropped_call"] + failures["changed_argument"] + failures["extra_call"] > 20


@pytest.mark.slow
@pytest.mark.parametrize("category", data.CATEGORIES)
def test_parity_on_every_task_and_perturbation(category):
    tasks = envs.make("bfcl", category=category).tasks("all")
    count, failures, mismatches = compare(category, tasks, repeats=3)
    print(f"bfcl-eval {data.bfcl_version()} {category}: {count} verdicts compared, failures {dict(failures)}")
    assert mismatches == [], mismatches[:3]
    assert all(failures[kind] == 0 for kind in UNCHANGED)
    assert all(failures[kind] > 0 for kind in PERTURBED)


def test_official_wrapper_leaves_no_cached_instances():
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    before = set(vars(multi_turn_utils))
    task = envs.make("bfcl").tasks("all")[0]
    entry = data.load_entries("multi_turn_base")[0]
    truth_strings = task.checker["ground_truth"]
    steps = [[turn] if turn else [] for turn in truth_strings]
    assert official_check(entry, steps, truth_strings)["valid"]
    assert official_check(entry, steps, truth_strings)["valid"]  # a second run sees fresh instances
    assert set(vars(multi_turn_utils)) == before
