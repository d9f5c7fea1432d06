"""The learning benchmark's protocol (`benchmarks/learning/protocol.py`): the final report runs the plan
frozen on validation and nothing else, and it may run that plan arm by arm over several sittings."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from coevolve.benchmarks.learning.arms import Plan
from coevolve.benchmarks.learning.outcomes import code_version
from coevolve.benchmarks.learning.protocol import FROZEN, ProtocolError, check_frozen, freeze

ARMS = ["grpo", "oracle-gap", "coevolve"]


def plan(arms=ARMS, **changes) -> Plan:
    """The coverage plan as `prepare` leaves it: the evolving arms' teacher named when an arm uses it."""
    made = Plan.make(quick=False, regime="coverage", rounds=2, seeds=2, arms=arms, **changes)
    uses_teacher = set(arms) - {"grpo", "oracle-gap"}
    return replace(made, teacher_model=Path("warm-start/teacher-key") if uses_teacher else None)


def test_the_final_runs_the_frozen_plan_whole_or_arm_by_arm(tmp_path):
    freeze(plan(), tmp_path, tmp_path)
    check_frozen(plan(phase="final"), tmp_path, tmp_path)
    # a sitting that runs only the teacherless arms builds no teacher: still the frozen plan
    check_frozen(plan(["grpo", "oracle-gap"], phase="final"), tmp_path, tmp_path)
    check_frozen(plan(["coevolve"], phase="final"), tmp_path, tmp_path)


def test_a_final_that_differs_from_the_frozen_plan_is_refused_naming_what(tmp_path):
    freeze(plan(), tmp_path, tmp_path)
    with pytest.raises(ProtocolError, match="arms unguided are not in the plan frozen"):
        check_frozen(plan([*ARMS, "unguided"], phase="final"), tmp_path, tmp_path)
    with pytest.raises(ProtocolError, match="the plan differs from the one frozen"):
        check_frozen(plan(phase="final", overrides=["train.lr=1e-4"]), tmp_path, tmp_path)
    # the teacherless arms of another config are another plan too
    with pytest.raises(ProtocolError, match="the plan differs from the one frozen"):
        check_frozen(plan(["grpo"], phase="final", overrides=["train.lr=1e-4"]), tmp_path, tmp_path)
    with pytest.raises(ProtocolError, match="no frozen plan"):
        check_frozen(plan(phase="final"), tmp_path / "elsewhere", tmp_path / "elsewhere")


def test_a_plan_frozen_without_the_teacher_arms_does_not_admit_them_later(tmp_path):
    freeze(plan(["grpo", "oracle-gap"]), tmp_path, tmp_path)
    check_frozen(plan(["grpo"], phase="final"), tmp_path, tmp_path)
    with pytest.raises(ProtocolError, match="arms coevolve are not in the plan frozen"):
        check_frozen(plan(phase="final"), tmp_path, tmp_path)


def test_a_final_under_stage_code_changed_since_the_freeze_is_refused(tmp_path):
    """The seeds were chosen from pilots that ran the frozen code: a final whose stages compute something
    else (a stage's version moved) is another experiment."""
    frozen = freeze(plan(), tmp_path, tmp_path)
    assert frozen["code"] == code_version()
    path = tmp_path / FROZEN
    path.write_text(json.dumps({**frozen, "code": "0123456789ab"}))
    with pytest.raises(ProtocolError, match=r"the stage code differs from the plan's frozen .* frozen 0123456789ab"):
        check_frozen(plan(phase="final"), tmp_path, tmp_path)
