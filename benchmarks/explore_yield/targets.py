"""The explore-yield benchmark's targets: signals naming each gap tool, on validation worlds.

A target is what the explore stage would receive from a signal (`stages.explore.exploration.Target`): a
world (a `validation` task of the coverage environment, with its covered family's request) whose tools
include a gap tool, the trajectory the signal marked, and the signal itself. The trajectory is
listing-only: the agent called an argument-free, read-only tool of the gap tool's app (its listing),
then answered, executed in the environment so its observation and outcome are the world's own. That is
what the starting policy does on such a world at best, and it never calls the gap tool, so an `unused`
signal names it (evidence as `stages.signals.rules.unused_signals` writes it).

The control is the same world and trajectory under a signal of the paper's kinds, which names no tool
(`boundary`, evidence: the trajectory's outcome).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import Environment, Task
from coevolve.llm.toolcalls import render_tool_call
from coevolve.stages.explore.exploration import Target

FINAL_REPLY = "I listed what there is."
"""The listing-only trajectory's answer after its one call."""
CONTROL_KIND = "boundary"
"""The control's signal kind: one of the paper's, naming no tool."""


@dataclass(frozen=True)
class Aim:
    """One target with what the benchmark measures it against: the gap tool a signal names (the control's
    names none, yet is measured against the same tool) and that tool's gap family."""

    target: Target
    tool: str
    family: str
    listing: str
    """The listing the marked trajectory called."""


def gap_tool_families(gap_families: Sequence[str]) -> dict[str, str]:
    """{gap tool: its family} of the coverage gap's families (each gap family calls one tool of its own)."""
    from coevolve.envs.toolworld.tasks import GAP_TEMPLATES, family_calls

    by_name = {t.name: t for t in GAP_TEMPLATES}
    unknown = [name for name in gap_families if name not in by_name]
    if unknown:
        raise ValueError(f"env.options.gap_families: no gap family {unknown[0]!r}")
    return {tool: name for name in gap_families for tool in sorted(family_calls(by_name[name]))}


def app_listings(tool: str) -> list[str]:
    """The argument-free tools of `tool`'s app, in catalog order (a listing candidate each)."""
    from coevolve.envs.toolworld.tools import ToolCatalog

    catalog = ToolCatalog()
    app = catalog.spec(tool).app
    return [name for name in catalog.names([app]) if not any(p.required for p in catalog.spec(name).params)]


def listing_trajectory(make_env: Callable[[], Environment], task: Task, listings: Sequence[str]
                       ) -> tuple[str, list[dict], str] | None:  # fmt: skip
    """(listing, steps rows, outcome) of the first of `listings` the world offers that runs and leaves its
    state as it was, executed in a fresh environment; None when none does."""
    for listing in listings:
        env = make_env()
        try:
            offered = {t["function"]["name"] for t in env.reset(task).tools}
            if listing not in offered:
                continue
            before = env.state_digest()
            reply = render_tool_call(ToolCall(name=listing))
            calls = env.step(reply).info.get("calls", [])
            call = calls[0] if calls else {}
            if not call.get("ok") or env.state_digest() != before:
                continue
            env.step(FINAL_REPLY)
            evaluation = env.evaluate()
        finally:
            env.close()
        observation = call.get("result")
        steps = [
            {"step": 0, "call_index": 0, "turn": 0, "reply": reply, "kind": "call", "tool": listing,
             "arguments": "{}", "ok": True,
             "observation": observation if isinstance(observation, str) else json.dumps(observation)},
            {"step": 1, "call_index": 0, "turn": 0, "reply": FINAL_REPLY, "kind": "answer", "tool": None,
             "arguments": None, "ok": True, "observation": ""},
        ]  # fmt: skip
        outcome = f"reward {evaluation.reward:.2f}, {'success' if evaluation.success else 'failure'}"
        return listing, steps, outcome
    return None


def unused_evidence(tool: str) -> str:
    """An `unused` signal's evidence for one marked trajectory (`stages.signals.rules.unused_signals`)."""
    return json.dumps({"tool": tool, "offered_trajectories": 1, "offered_tasks": 1, "window_calls": 0,
                       "first_round": 0})  # fmt: skip


def build_aims(make_env: Callable[[], Environment], worlds: Sequence[Task], gap_families: Sequence[str], *,
               per_tool: int, named: bool, seed: int = 0, round_: int = 0) -> list[Aim]:  # fmt: skip
    """`per_tool` targets per gap tool, each on another world of `worlds` offering it (drawn with `seed`,
    the same draw for the control and every variant; no world serves two targets, as the explore stage
    takes one signal per task), a listing-only trajectory marked: under an `unused`
    signal naming the tool when `named`, else the control's signal naming none. Raises ValueError when
    fewer worlds than `per_tool` offer a gap tool."""
    aims, taken = [], set()  # one target per world: the explorer keys its instructions by the world's task id
    for tool, family in gap_tool_families(gap_families).items():
        rng = random.Random(f"explore-yield:{seed}:{tool}")
        listings = app_listings(tool)
        chosen = []
        for world in rng.sample(list(worlds), len(worlds)):
            if len(chosen) == per_tool:
                break
            if world.id in taken:
                continue
            found = listing_trajectory(make_env, world, listings)
            if found is not None:
                chosen.append((world, *found))
                taken.add(world.id)
        if len(chosen) < per_tool:
            raise ValueError(f"--worlds {per_tool}: only {len(chosen)} worlds offer {tool} with a listing")
        for world, listing, steps, outcome in chosen:
            trajectory_id = content_hash(["explore-yield", world.id, listing])
            kind, evidence = ("unused", unused_evidence(tool)) if named else (CONTROL_KIND, json.dumps(
                {"samples": 1, "outcome": outcome}))  # fmt: skip
            signal_id = content_hash([kind, round_, world.id, trajectory_id, tool])
            target = Target(content_hash(["explore-yield", round_, signal_id]), world, kind, signal_id,
                            trajectory_id, steps, outcome, evidence)  # fmt: skip
            aims.append(Aim(target, tool, family, listing))
    return aims
