"""Checker specs and scoring for tool-world tasks.

A checker spec is plain data stored in `Task.checker`:

    {"final_state": <world state after replaying the reference solution>,
     "answers": [[value, ...] per turn]}   # strings that must appear in that turn's final reply

`build_checker` computes it by replaying the solution on the initial state, and refuses a task whose
reference calls fail or whose answers the agent could not have seen (in a user turn or a tool result).
`score` compares the whole final state (so a stray mutation anywhere fails) and looks for each answer in
the reply of its turn: case-insensitive for text, by value for numbers ("1520.5", "1,520.50" and
"1520.50" all match "1520.00"-style money answers, which `money` renders with 2 decimals).

Reward: 1.0 on success; otherwise a partial credit that stays below 0.5 (so success <=> reward >= 0.5):

    0.35 x (fraction of checks passed)           checks: one per app in the expected or actual final state
                                                 (equal or not) and one per required answer
  + 0.05 if some tool call ran without error
  + 0.05 x (fraction of the reference solution's tools the agent called, even with wrong arguments)
  + 0.04 x (fraction of the agent's tool-call blocks that parsed into a call)

The last three terms make failed episodes differ when they differ in how close they came (a malformed
call, a hallucinated tool, the right tool with wrong arguments, a call that ran), so that a GRPO group of
failures, the common case for a small model, still carries a learning signal.
`Evaluation.progress` is the fraction of checks passed alone: how much of the task got done, the
measure verification's retain rule weighs.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.answers import answer_found
from coevolve.envs.base import Evaluation
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.envs.toolworld.world import World

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
def money(amount: float) -> str:
    """How money answers are rendered: 2 decimals, no thousands separator."""
    return f"{amount:.2f}"


def build_checker(
    catalog: ToolCatalog,
    initial_state: dict[str, Any],
    turns: Sequence[str],
    solution: Sequence[Sequence[ToolCall]],
    answers: Sequence[Sequence[str]],
    *,
    strict: bool = True,
) -> dict[str, Any]:
    """Replay `solution` on `initial_state`; the spec holds the resulting state and the answers.

    `strict=False` (the no-verification ablation) never refuses: failing calls are skipped and answers
    nobody could have seen are dropped, so a broken task still gets a (meaningless) checker.
    """
    world = World(initial_state)
    offered = catalog.names(world.loaded)
    seen: list[str] = []
    for turn, calls in enumerate(solution):
        seen.append(turns[turn])
        for call in calls:
            outcome = catalog.call(world.apps, call, offered)
            if not outcome.ok and strict:
                raise ValueError(f"reference call {call.signature()} failed: {outcome.error}")
            seen.append(outcome.content())
        missing = [
            a for a in (answers[turn] if turn < len(answers) else []) if not answer_found(a, "\n".join(seen))
        ]
        if missing and strict:
            raise ValueError(f"answers {missing} of turn {turn} appear in no message or tool result")
    kept = [
        [a for a in turn_answers if strict or answer_found(a, "\n".join(seen))] for turn_answers in answers
    ]
    return {"final_state": world.state(), "answers": kept}


@dataclass(frozen=True)
class ToolUse:
    """What the agent did with tools during the episode (for partial credit)."""

    any_ok: bool = False
    """Some call ran without error."""
    called: frozenset[str] = frozenset()
    """Names the agent called, known tools or not, whether the call worked or not."""
    parsed: int = 0
    """Tool-call blocks that parsed into a call."""
    malformed: int = 0
    """Tool-call blocks that did not parse."""

    @property
    def well_formed(self) -> float:
        blocks = self.parsed + self.malformed
        return self.parsed / blocks if blocks else 0.0


def score(
    checker: dict[str, Any],
    final_state: dict[str, Any],
    replies: Sequence[str | None],
    use: ToolUse = ToolUse(),
    solution_tools: Collection[str] = (),
) -> Evaluation:
    """Success iff the final state equals the expected one and every answer is in its turn's reply."""
    expected = checker["final_state"]
    apps = {
        app: expected.get(app) == final_state.get(app) for app in sorted(set(expected) | set(final_state))
    }
    answers = [
        {
            "turn": turn,
            "value": value,
            "found": answer_found(value, replies[turn] if turn < len(replies) else None),
        }
        for turn, values in enumerate(checker.get("answers") or [])
        for value in values
    ]
    passed = sum(apps.values()) + sum(a["found"] for a in answers)
    total = len(apps) + len(answers)
    success = passed == total
    wanted = set(solution_tools)
    coverage = len(use.called & wanted) / len(wanted) if wanted else 0.0
    partial = 0.35 * passed / max(total, 1) + 0.05 * use.any_ok + 0.05 * coverage + 0.04 * use.well_formed
    details = {
        "state_match": all(apps.values()),
        "apps": apps,
        "answers": answers,
        "checks_passed": passed,
        "checks_total": total,
        "tool_call_ok": use.any_ok,
        "well_formed_calls": round(use.well_formed, 4),
        "solution_tools_used": round(coverage, 4),
        "mismatched_apps": [app for app, ok in apps.items() if not ok],
    }
    return Evaluation(reward=1.0 if success else round(partial, 4), success=success, details=details,
                      progress=round(passed / max(total, 1), 4))
