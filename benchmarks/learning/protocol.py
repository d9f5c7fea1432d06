"""The learning benchmark's protocol: develop on `validation`, freeze the plan, report `test` once.

Every development decision (config, rounds, arms' overrides, the number of seeds) is made on pilot runs
that evaluate the tool world's `validation` split only (`Plan.phase = "validation"`). Once the plan is
settled, `--freeze` records its fingerprint (`outcomes.plan_fingerprint`: config text, rounds, overrides,
teacher build) with the seeds and arms in `frozen-plan.json`; `--final` then runs the same plan evaluating
`test` and `heldout-templates`, and refuses any plan whose fingerprint differs from the frozen one, or that
runs an arm the frozen plan does not have. A final invocation of teacherless arms only (it builds no
teacher) matches the frozen plan's fingerprint without the teacher build, as their outcomes do
(`outcomes.same_plan`): the final can run arm by arm over several sittings. A changed config after the
freeze needs a new freeze, which the record's history shows.

The number of seeds comes from the pilots: `seeds_for_power` on the spread of the per-seed differences
between arms on validation, on the regime's endpoint, for a true difference of the regime's `effect`
(`plan.Regime`: 5 points in-distribution, 15 on the coverage gap) at power `POWER`.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from coevolve.benchmarks.learning.arms import Plan
from coevolve.benchmarks.learning.outcomes import code_version, plan_fingerprint

FROZEN = "frozen-plan.json"
POWER = 0.8


class ProtocolError(ValueError):
    """A final run of a plan that was not frozen, or differs from the frozen one."""


def freeze(plan: Plan, root: Path, folder: Path) -> dict:
    """Write `folder/frozen-plan.json` for `plan` (refusing to replace a different frozen plan); returns it."""
    from coevolve.benchmarks.record import current_commit

    path = folder / FROZEN
    frozen = {"fingerprint": plan_fingerprint(plan, root), "teacherless": plan_fingerprint(plan, root, teacher=False),
              "config": str(plan.config), "rounds": plan.rounds,
              "overrides": [o.replace(str(root), "<root>") for o in plan.overrides], "seeds": plan.seeds,
              "arms": list(plan.arms), "code": code_version(), "date": datetime.date.today().isoformat(),
              "commit": current_commit()}  # fmt: skip
    if path.exists():
        before = json.loads(path.read_text())
        if before["fingerprint"] != frozen["fingerprint"]:
            raise ProtocolError(f"{path} freezes another plan ({before['fingerprint']}, {before['date']}): "
                                f"move it aside to freeze a new one, so the record keeps what was reported")  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    from coevolve.storage.parquet import write_text_atomic

    write_text_atomic(json.dumps(frozen, indent=2) + "\n", path)
    return frozen


def check_frozen(plan: Plan, root: Path, folder: Path) -> dict:
    """The frozen plan `plan` matches; `ProtocolError` naming the difference otherwise."""
    path = folder / FROZEN
    if not path.exists():
        raise ProtocolError(f"no frozen plan at {path}: develop on validation, then `--freeze`, before `--final`")
    frozen = json.loads(path.read_text())
    others = [arm for arm in plan.arms if arm not in frozen["arms"]]
    if others:
        raise ProtocolError(f"arms {', '.join(others)} are not in the plan frozen in {path} (arms "
                            f"{', '.join(frozen['arms'])}): the final report runs the frozen plan only")  # fmt: skip
    mine = plan_fingerprint(plan, root)
    builds_no_teacher = mine == plan_fingerprint(plan, root, teacher=False)
    if mine != frozen["fingerprint"] and not (builds_no_teacher and mine == frozen.get("teacherless")):
        raise ProtocolError(f"the plan differs from the one frozen in {path} ({frozen['date']}, config "
                            f"{frozen['config']}, {frozen['rounds']} rounds, overrides {frozen['overrides']}): "
                            "the final report runs the frozen plan only")  # fmt: skip
    if frozen.get("code", code_version()) != code_version():
        raise ProtocolError(f"the stage code differs from the plan's frozen in {path} (version {code_version()}, "
                            f"frozen {frozen['code']} at commit {frozen['commit']}): a stage computes something "
                            "else since the freeze; run the final with the frozen code")  # fmt: skip
    return frozen
