"""The coverage experiment's second plan (`--regime coverage-v2`): its arms load as configs, its final seeds
are none a pilot used, its gap families all need their tool, and a final run's record holds no figure."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from coevolve.benchmarks.learning.arms import ARMS, OWN_TEACHER_ARMS, Plan, run_overrides
from coevolve.config import load_config
from tests.conftest import CONFIGS

NAMED_TOOL = ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.allotment=round_robin",
              "explore.named_tool_context=true", "explore.prefill_named_tool=true",
              "warm_start.teacher_named_tool_examples=true")  # fmt: skip


def test_final_seeds_are_none_a_pilot_used_and_the_primary_pair_runs_at_each():
    pilots = Plan.make(quick=False, regime="coverage-v2", seeds=3)
    final = Plan.make(quick=False, regime="coverage-v2", seeds=3, phase="final")
    assert {s for _, s in pilots.reported_runs()} == {0, 1, 2}
    assert {s for _, s in final.reported_runs()} == {100, 101, 102}
    assert {a for a, s in final.reported_runs() if s == 100} == {"grpo", "oracle-gap", "coevolve", "coevolve-unused",
                                                                  "unguided"}  # fmt: skip
    assert {a for a, s in final.reported_runs() if s == 102} == {"grpo", "coevolve-unused"}
    later = Plan.make(quick=False, regime="coverage-v2", seeds=3, phase="final", first_seed=2, arms=["grpo"])
    assert later.runs() == [("grpo", 102)] and later.run_name("grpo", 102) == "coverage2-grpo-s102"
    assert (final.endpoint, final.experiment.effect, final.experiment.sealed_test) == ("gap-test", 0.10, True)
    # the first plan keeps its seeds 0..: its recorded runs stay its runs
    assert {s for _, s in Plan.make(quick=False, regime="coverage", seeds=2, phase="final").reported_runs()} == {0, 1}


def test_the_named_tool_arm_carries_every_extension_and_builds_its_own_teacher():
    assert set(NAMED_TOOL) <= set(ARMS["coevolve-unused"]) and "coevolve-unused" in OWN_TEACHER_ARMS
    plan = replace(Plan.make(quick=False, regime="coverage-v2", seeds=1), teacher_model=CONFIGS / "teacher")
    assert "teacher.model" not in " ".join(run_overrides(plan, "coevolve-unused", 0))
    assert f"teacher.model={CONFIGS / 'teacher'}" in run_overrides(plan, "coevolve", 0)


@pytest.mark.parametrize("arm", ["grpo", "oracle-gap", "coevolve", "unguided", "coevolve-unused"])
def test_every_arm_of_the_second_plan_loads_and_names_only_gap_families_that_need_their_tool(arm):
    from coevolve.envs.toolworld.gap_check import check_families

    plan = replace(Plan.make(quick=False, regime="coverage-v2", seeds=1), teacher_model=CONFIGS / "teacher")
    config = load_config(plan.config, run_overrides(plan, arm, 0))
    assert len(config.gap_families) >= 8
    assert not any(check_families(config.gap_families, tasks_per_family=2).values())


def test_a_sealed_final_run_records_its_rows_and_writes_no_report_curve_or_figure(tmp_path):
    from coevolve.benchmarks.learning.outcomes import OUTCOMES, code_version, plan_fingerprint
    from coevolve.benchmarks.learning.report import record_runs

    plan = Plan.make(quick=False, regime="coverage-v2", seeds=1, phase="final", arms=["grpo"], warm_start_tasks=0,
                     teacher_tasks=0)  # fmt: skip
    out = tmp_path / "record"
    out.mkdir()
    pl.DataFrame({"run": ["coverage2-grpo-s100"], "arm": ["grpo"], "seed": [100], "updates": [plan.rounds],
                  "split": ["gap-test"], "task_id": ["t"], "family": ["f"], "success": [1.0],
                  "plan": [plan_fingerprint(plan, tmp_path)], "code": [code_version()]}).write_parquet(out / OUTCOMES)
    line = record_runs(tmp_path, plan, out, {})
    assert line.startswith("recorded grpo s100") and "%" not in line
    assert not (out / "report.md").exists() and not (out / "curves.parquet").exists()
    assert pl.read_parquet(out / OUTCOMES)["run"].to_list() == ["coverage2-grpo-s100"]
    assert (out / "runs" / "audit_explorations.parquet").exists()


def test_the_plans_one_baseline_is_carried_into_a_new_storage_root_not_computed_again(tmp_path):
    from coevolve.benchmarks.learning.runs import ensure_shared_baseline

    plan = Plan.make(quick=False, regime="coverage-v2", seeds=2, phase="final")
    first, later = tmp_path / "sitting-1", tmp_path / "sitting-2"
    stage = first / "run=coverage2-grpo-s100" / "round=0" / "stage=baseline"
    stage.mkdir(parents=True)
    (stage / "_manifest.json").write_text("{}")
    (stage / "evals.parquet").write_text("rows")
    (first / "run=coverage2-grpo-s100" / "config.yaml").write_text("run: {}")
    with pytest.raises(ValueError, match="--baseline-from .*sitting-2: no baseline of run coverage2-grpo-s100"):
        ensure_shared_baseline(plan, tmp_path / "sitting-3", carried=later)
    assert ensure_shared_baseline(plan, later, carried=first).startswith("coverage2-grpo-s100 carried from")
    assert (later / "run=coverage2-grpo-s100" / "round=0" / "stage=baseline" / "evals.parquet").read_text() == "rows"
    assert ensure_shared_baseline(plan, later) == f"coverage2-grpo-s100 in {later}"


def test_a_baseline_the_record_says_was_computed_is_never_computed_again_in_a_new_root(tmp_path):
    from coevolve.benchmarks.learning.runs import ensure_shared_baseline

    plan = Plan.make(quick=False, regime="coverage-v2", seeds=2, phase="final")
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "shared-baseline-final.json").write_text("{}")
    with pytest.raises(ValueError, match="computed in an earlier sitting .*pass --baseline-from"):
        ensure_shared_baseline(plan, tmp_path / "new-root", record=tmp_path / "record")
