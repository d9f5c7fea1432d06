"""BFCL's multi-turn success rule, on our executor, reusing bfcl-eval's pure `state_checker` / `response_checker`.

As in `multi_turn_checker.py`: the model's decoded calls are re-executed on fresh instances and the ground
truth on another fresh set, both cumulatively, turn by turn. The number of turns must match (a task
force-quit before its last turn fails). Each turn with a non-empty ground truth passes when (1) it has at
least one decoded step, (2) every public attribute of every involved instance equals the ground truth's,
and (3) that turn's ground-truth result strings, as a multiset, are contained in all the model's results
so far. Turns with an empty ground truth are executed but not checked. Success means every checked turn
passes; the official checker stops at the first failure, which gives the same verdict.

Unlike the official checker we also score the turns after a failure, for `turn_fraction` (passing
checked turns / checked turns), the optional partial credit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.bfcl.backends import Backends, Scenario


@dataclass
class Verdict:
    """The outcome of the official rule plus per-turn detail."""

    success: bool
    turns_checked: int
    turns_passed: int
    failure: dict[str, Any] | None = None
    turn_passed: list[bool | None] = field(default_factory=list)

    @property
    def turn_fraction(self) -> float:
        return self.turns_passed / self.turns_checked if self.turns_checked else 0.0


def check_turns(
    scenario: Scenario,
    model_turns: Sequence[Sequence[Sequence[ToolCall]]],
    truth: Sequence[Sequence[ToolCall]],
    param_types: Mapping[str, Mapping[str, Any]] | None = None,
) -> Verdict:
    """Apply the official rule to the model's decoded steps per turn (each step a non-empty list of calls)."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker

    model, reference = Backends(scenario, param_types), Backends(scenario, param_types)
    all_model_results: list[str] = []
    turn_passed: list[bool | None] = []
    failure: dict[str, Any] | None = None
    if len(model_turns) != len(truth):
        failure = {
            "turn": len(model_turns),
            "error_type": "multi_turn:force_terminated",
            "error_message": f"the episode has {len(model_turns)} turns, the ground truth {len(truth)}",
        }
    for index, truth_calls in enumerate(truth):
        steps = [step for step in (model_turns[index] if index < len(model_turns) else []) if step]
        for step in steps:
            all_model_results.extend(model.run(call).content for call in step)
        truth_results = [reference.run(call).content for call in truth_calls]
        if not truth_calls:
            turn_passed.append(None)
            continue
        if not steps:
            result = {
                "valid": False,
                "error_type": "multi_turn:empty_turn_model_response",
                "error_message": f"Model response list is empty for turn {index}",
            }
        else:
            result = state_checker(model.instances, reference.instances)
            if result["valid"]:
                result = response_checker(all_model_results, truth_results, index)
        turn_passed.append(bool(result["valid"]))
        if not result["valid"] and failure is None:
            failure = {
                "turn": index,
                "error_type": result["error_type"],
                "error_message": result["error_message"],
            }
    checked = [p for p in turn_passed if p is not None]
    return Verdict(failure is None, len(checked), sum(checked), failure, turn_passed)
