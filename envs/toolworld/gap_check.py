"""Does a gap family need its tool? Replay what the training data already teaches on its tasks.

A coverage gap (`families_gap`) is worth learning only if its tasks cannot be solved without the gap tool.
`covered_successes` replays, on one task, every strategy open to a policy that never calls a gap tool, and
scores each with the task's own checker (`checker.score`):

- every argument-free listing of the task's apps (a tool with no required argument that changes nothing),
  alone and all of them together;
- every call of a covered tool (one some training family calls) that the task's world admits: each
  required argument drawn from the task itself (the state's ids, names and values, the request's quoted
  texts and numbers, small quantities), and for text arguments also an existing file's content with the
  request's text as a new line (the training family `copy_file`'s read-then-write, adapted: how
  `write_file` stands in for `append_to_file`);

each reply holding every tool result the strategy saw, so an answer any of them exposes counts as found.
A family one of whose tasks any strategy solves is no gap (`needs_its_tool`). The first coverage plan's
`product_price`, `event_date`, `contact_email` and `find_file` fail it (a covered listing shows their
answer), and `append_note` does (`write_file` rewrites the file); `families_gap` retires them.

    python -m coevolve.envs.toolworld.gap_check     # every gap family, 16 tasks each
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator, Sequence
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.toolworld.checker import score
from coevolve.envs.toolworld.tools import ToolCatalog, ToolSpec
from coevolve.envs.toolworld.world import World

MAX_CALLS_PER_TOOL = 4000
"""A bound on one covered tool's argument combinations per task (the pools are small: ~1,000 at most)."""
_QUOTED = re.compile(r"'([^']+)'")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def covered_successes(task: Task, catalog: ToolCatalog, covered: set[str]) -> list[str]:
    """The strategies (rendered as their calls) that solve `task` without a gap tool; empty: it needs one."""
    world = World(task.initial_state)
    offered = catalog.names(world.loaded)
    listings = [name for name in offered if _is_listing(catalog.spec(name), task.initial_state, catalog)]
    strategies: list[list[ToolCall]] = [[ToolCall(name=name, arguments={})] for name in listings]
    strategies.append([ToolCall(name=name, arguments={}) for name in listings])
    pools = _argument_pools(task)
    for name in offered:
        if name in covered:
            strategies.extend([call] for call in _calls_of(catalog.spec(name), pools))
    return [" ; ".join(c.signature() for c in calls) for calls in strategies if _solves(task, catalog, calls)]


def needs_its_tool(tasks: Sequence[Task], catalog: ToolCatalog, covered: set[str]) -> dict[str, list[str]]:
    """Per family of `tasks`: the first covered strategy that solved one of its tasks (none: the family needs
    its gap tool), as `task id: calls`."""
    found: dict[str, list[str]] = {}
    for task in tasks:
        wins = found.setdefault(task.family, [])
        if not wins:
            wins.extend(f"{task.id}: {s}" for s in covered_successes(task, catalog, covered)[:1])
    return found


def _solves(task: Task, catalog: ToolCatalog, calls: Sequence[ToolCall]) -> bool:
    world = World(task.initial_state)
    offered = catalog.names(world.loaded)
    seen = [catalog.call(world.apps, call, offered).content() for call in calls]
    return score(task.checker, world.state(), ["\n".join(seen)]).success


def _is_listing(spec: ToolSpec, state: dict[str, Any], catalog: ToolCatalog) -> bool:
    """No required argument, and calling it leaves the world as it was."""
    if any(p.required for p in spec.params):
        return False
    world = World(state)
    before = world.state()
    catalog.call(world.apps, ToolCall(name=spec.name, arguments={}), catalog.names(world.loaded))
    return world.state() == before


def _argument_pools(task: Task) -> dict[str, list[Any]]:
    """Candidate values by JSON type, drawn from the task's state and its requests."""
    strings, numbers = set(), set()
    for value in _leaves(task.initial_state):
        (strings if isinstance(value, str) else numbers).add(value)
    request = " ".join(task.turns)
    strings |= set(_QUOTED.findall(request)) | set(re.findall(r"[A-Za-z]+-\d+|/[\w/.-]+", request))
    numbers |= {float(n) for n in _NUMBER.findall(request)}
    files = task.initial_state.get("files", {}).get("files", {})
    strings |= {f"{content}\n{text}" for content in files.values() for text in _QUOTED.findall(request)}
    integers = {int(n) for n in numbers if float(n).is_integer() and 0 < n < 100} | {1, 2, 3}
    return {"string": sorted(strings), "number": sorted(numbers | integers), "integer": sorted(integers),
            "boolean": [True, False]}  # fmt: skip


def _leaves(value: Any) -> Iterator[str | float]:
    """Every dict key and scalar of a JSON value (booleans left out)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        yield value


def _calls_of(spec: ToolSpec, pools: dict[str, list[Any]]) -> Iterator[ToolCall]:
    """Calls of `spec` with its required arguments drawn from `pools` (optional ones left out)."""
    required = [p for p in spec.params if p.required]
    choices = itertools.product(*(pools[p.json_type] for p in required))
    for values in itertools.islice(choices, MAX_CALLS_PER_TOOL):
        yield ToolCall(name=spec.name, arguments={p.name: v for p, v in zip(required, values, strict=True)})


def check_families(families: Sequence[str], tasks_per_family: int = 16, seed: int = 0) -> dict[str, list[str]]:
    """`needs_its_tool` over `tasks_per_family` fresh tasks of each gap family (a stream of their own)."""
    from coevolve.envs.toolworld.tasks import GAP_TEMPLATES, make_task, training_tools

    catalog, by_name = ToolCatalog(), {t.name: t for t in GAP_TEMPLATES}
    tasks = [make_task(catalog, by_name[family], random.Random(f"toolworld:gap-check:{seed}:{family}:{i}"), "gap-check")
             for family in families for i in range(tasks_per_family)]  # fmt: skip
    return needs_its_tool(tasks, catalog, training_tools())


if __name__ == "__main__":
    from coevolve.envs.toolworld.tasks import GAP_TEMPLATES

    for family, wins in check_families([t.name for t in GAP_TEMPLATES]).items():
        print(f"{family:24s} {'needs its tool' if not wins else 'solved without it: ' + wins[0]}")
