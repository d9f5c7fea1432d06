"""Smoke test of the learning benchmark's code on the tiny model: arms run through the real flow, the
curves, the bootstrap interval, the report and the plot come out."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
import yaml

from tests.conftest import CONFIGS

pytestmark = pytest.mark.slow


def test_bootstrap_interval_brackets_the_point_estimate():
    from coevolve.benchmarks.learning.statistics import bootstrap_difference

    rows = [
        {"arm": arm, "seed": seed, "updates": 2, "split": "test", "task_id": f"t{t}",
         "success": int(arm == "coevolve" and t % 2 == 0 or t == 0)}
        for arm in ("coevolve", "grpo") for seed in (0, 1) for t in range(10)
    ]  # fmt: skip
    point, low, high = bootstrap_difference(pl.DataFrame(rows), "coevolve", "grpo", updates=2)
    assert point == pytest.approx(0.4) and low <= point <= high and low > 0
    assert bootstrap_difference(pl.DataFrame(rows), "coevolve", "grpo", updates=5) is None


def test_arms_identical_seed_by_seed_differ_by_exactly_zero():
    from coevolve.benchmarks.learning.statistics import bootstrap_difference

    rows = [
        {"arm": arm, "seed": seed, "updates": 3, "split": "test", "task_id": f"t{t}", "success": int((t + seed) % 3 == 0)}
        for arm in ("coevolve", "grpo") for seed in (0, 1) for t in range(12)
    ]  # fmt: skip
    assert bootstrap_difference(pl.DataFrame(rows), "coevolve", "grpo", updates=3) == (0.0, 0.0, 0.0)


def _outcomes(run: str, plan: str, success: int, tasks: int = 3) -> list[dict]:
    arm, seed = run.removeprefix("learning-").rsplit("-s", 1)
    return [{"run": run, "arm": arm, "seed": int(seed), "updates": 1, "split": "test", "task_id": f"t{t}",
             "family": "bank_balance", "success": success, "plan": plan} for t in range(tasks)]  # fmt: skip


def test_recorded_outcomes_fill_runs_missing_from_storage_and_nothing_recorded_is_lost():
    from coevolve.benchmarks.learning.outcomes import OUTCOME_SCHEMA, merge_outcomes

    recorded = pl.DataFrame(_outcomes("learning-grpo-s0", "p1", 1) + _outcomes("learning-grpo-s1", "p1", 1)
                            + _outcomes("learning-grpo-s2", "p2", 1), schema=OUTCOME_SCHEMA)  # fmt: skip
    stored = pl.DataFrame(_outcomes("learning-grpo-s1", "p1", 0)).drop("plan")
    names = ["learning-grpo-s0", "learning-grpo-s1", "learning-grpo-s2"]
    reported, record = merge_outcomes(stored, recorded, names, "p1", "c1")
    # s0 from the record; s1 as stored (storage wins); s2 was measured under another plan: not reported
    assert dict(reported.group_by("run").agg(pl.col("success").sum()).iter_rows()) == {
        "learning-grpo-s0": 3, "learning-grpo-s1": 0}
    assert record.height == 9 and record.filter(pl.col("run") == "learning-grpo-s1")["success"].sum() == 0
    assert record.filter(pl.col("plan") == "p2").height == 3


def test_teacherless_arms_recorded_without_a_teacher_build_join_a_plan_that_has_one():
    from coevolve.benchmarks.learning.outcomes import OUTCOME_SCHEMA, merge_outcomes

    # grpo ran in an invocation of teacherless arms alone (no teacher built: fingerprint "bare"); coevolve in
    # one that built the teacher ("full"); a coevolve row under "bare" belongs to no run of this plan
    recorded = pl.DataFrame(_outcomes("learning-grpo-s0", "bare", 1) + _outcomes("learning-coevolve-s0", "full", 0)
                            + _outcomes("learning-coevolve-s1", "bare", 1), schema=OUTCOME_SCHEMA)  # fmt: skip
    stored = pl.DataFrame(schema={k: v for k, v in OUTCOME_SCHEMA.items() if k not in ("plan", "code")})
    names = ["learning-grpo-s0", "learning-coevolve-s0", "learning-coevolve-s1"]
    reported, record = merge_outcomes(stored, recorded, names, "full", "c1", teacherless="bare")
    assert sorted(set(reported["run"])) == ["learning-coevolve-s0", "learning-grpo-s0"] and record.height == 9


def test_recorded_runs_of_another_code_version_are_refused_not_mixed():
    from coevolve.benchmarks.learning.outcomes import (
        OUTCOME_SCHEMA,
        MixedCodeError,
        code_version,
        merge_outcomes,
    )

    rows = _outcomes("learning-grpo-s0", "p1", 1) + _outcomes("learning-coevolve-s0", "p1", 0)
    recorded = pl.DataFrame([{**row, "code": "old" if "coevolve" in row["run"] else None} for row in rows],
                            schema=OUTCOME_SCHEMA)  # fmt: skip
    stored = pl.DataFrame(schema={k: v for k, v in OUTCOME_SCHEMA.items() if k not in ("plan", "code")})
    with pytest.raises(MixedCodeError, match="learning-coevolve-s0 were computed by stage versions other"):
        merge_outcomes(stored, recorded, ["learning-grpo-s0", "learning-coevolve-s0"], "p1", "new")
    # a run recorded before code versions were kept (null) counts as this code's; another plan's rows are no concern
    reported, _ = merge_outcomes(stored, recorded, ["learning-grpo-s0"], "p1", "new")
    assert reported.height == 3
    assert len(code_version()) == 12 and code_version() == code_version()


def test_an_unreadable_outcomes_file_is_named(tmp_path):
    from coevolve.benchmarks.learning.outcomes import recorded_outcomes

    assert recorded_outcomes(tmp_path / "none.parquet").height == 0
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="bad.parquet: not a readable Parquet file"):
        recorded_outcomes(tmp_path / "bad.parquet")
    old = pl.DataFrame(_outcomes("learning-grpo-s0", "p1", 1)).drop("family")  # written before families were kept
    old.write_parquet(tmp_path / "old.parquet")
    assert recorded_outcomes(tmp_path / "old.parquet")["family"].to_list() == [None] * 3
    pl.DataFrame({"run": ["x"]}).write_parquet(tmp_path / "other.parquet")
    with pytest.raises(ValueError, match=r"other.parquet: not an outcomes table, missing columns \['arm'"):
        recorded_outcomes(tmp_path / "other.parquet")


def test_first_seed_runs_the_later_seeds_and_reports_every_seed():
    from coevolve.benchmarks.learning.arms import Plan

    plan = Plan.make(quick=False, seeds=3, arms=["grpo", "coevolve", "no-rare"], first_seed=1)
    assert plan.runs() == [("grpo", 1), ("coevolve", 1), ("grpo", 2), ("coevolve", 2)]
    assert plan.reported_runs()[:3] == [("grpo", 0), ("coevolve", 0), ("no-rare", 0)]
    with pytest.raises(ValueError, match="first_seed"):
        Plan.make(quick=False, seeds=3, first_seed=3)


def test_report_names_runs_as_arms_with_seed_ranges():
    from coevolve.benchmarks.learning.report import describe_runs

    runs = ["learning-grpo-s0", "learning-coevolve-s0", "learning-no-verify-s0", "learning-grpo-s1",
            "learning-coevolve-s1", "learning-grpo-s2", "learning-grpo-s5"]  # fmt: skip
    assert describe_runs(runs) == "grpo s0-2, 5; coevolve s0-1; no-verify s0"


def test_teacher_output_counts_candidates_by_status_and_folds_reasons(tmp_path):
    from coevolve.benchmarks.learning.tables import rejections, teacher_output, top_reasons
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    def candidate(i: int, status: str, reason: str | None) -> dict:
        return {"candidate_id": f"c{i}", "group_id": "g", "exploration_id": "e", "task_id": "t", "env": "toolworld",
                "teacher": "local", "status": status, "reason": reason, "initial_state": "{}", "raw_reply": "[]"}  # fmt: skip

    def verdict(i: int, outcome: str, reason: str) -> dict:
        return {"verification_id": f"v{i}", "candidate_id": f"c{i}", "outcome": outcome, "reason": reason,
                "attempts": 1, "policy_version": "p"}  # fmt: skip

    store = RunStore(RunLayout(tmp_path, "learning-coevolve-s0"))
    store.write(0, "abstract", "candidates", [
        candidate(0, "ok", None), candidate(1, "ok", None), candidate(2, "ok", None),
        candidate(3, "invalid", "solution item 7 is neither an observed call index nor a call"),
        candidate(4, "invalid", "solution item 12 is neither an observed call index nor a call"),
        candidate(5, "duplicate", 'same solution as dataset task ["send_message", {"to": "Ana"}]'),
        candidate(6, "unparsable", "no JSON array in the reply"),
        candidate(7, "duplicate", "near-duplicate of ba2616ee7d70a46d")])  # fmt: skip
    store.write(0, "verify", "verifications", [
        verdict(0, "accept", "solved 1 of 1"), verdict(1, "discard", "answer 41.5 appears in no result"),
        verdict(2, "discard", "answer 3 appears in no result"),
        verdict(7, "retain", "partial reward")])  # fmt: skip  # 7 stood in for the discarded 2
    row = teacher_output(tmp_path, ["learning-coevolve-s0", "learning-grpo-s0"]).to_dicts()
    assert row == [{"run": "learning-coevolve-s0", "candidates": 8, "ok": 3, "unparsable": 1, "invalid": 2,
                    "duplicate": 2, "stand_ins": 1, "admitted": 2, "discarded": 2}]  # fmt: skip
    reasons = top_reasons(rejections(tmp_path, ["learning-coevolve-s0"])).rows()
    assert reasons[:2] == [("candidate invalid", "solution item N is neither an observed call index nor a call", 2),
                           ("verification discard", "answer N appears in no result", 2)]  # fmt: skip
    assert ("candidate duplicate", "same solution as dataset task {…}", 1) in reasons
    assert ("candidate duplicate", "near-duplicate of <id>", 1) in reasons
    assert teacher_output(tmp_path / "empty", ["learning-grpo-s0"]).height == 0  # no candidates anywhere


def test_revisited_counts_tasks_rolled_out_in_two_rounds_and_ignores_other_sources(tmp_path):
    from coevolve.benchmarks.learning.tables import evolution_counts
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    def episode(task: str, source: str) -> dict:
        return {"trajectory_id": f"{task}-{source}", "source": source, "task_id": task, "group_id": task,
                "sample": 0, "policy_version": "p", "reward": 1.0, "success": True, "finish": "done",
                "error": None, "num_turns": 1, "num_steps": 1, "num_tool_calls": 1, "num_tool_errors": 0,
                "prompt_tokens": 10, "completion_tokens": 5, "messages": "[]", "eval_details": "{}"}  # fmt: skip

    store = RunStore(RunLayout(tmp_path, "learning-coevolve-s0"))
    store.write(0, "rollout", "trajectories", [episode("a", "rollout"), episode("b", "rollout")])
    store.write(1, "rollout", "trajectories", [episode("a", "rollout"), episode("c", "rollout")])
    store.write(1, "evaluate", "trajectories", [episode("b", "eval")])  # an eval of b is no second draw
    counts = evolution_counts(tmp_path, ["learning-coevolve-s0", "learning-grpo-s0"])
    assert dict(zip(counts["run"], counts["revisited"], strict=True)) == {
        "learning-coevolve-s0": 1, "learning-grpo-s0": 0}
    assert dict(zip(counts["run"], counts["rollout_tokens"], strict=True))["learning-coevolve-s0"] == 20


def test_exploration_breadth_counts_calls_beyond_the_explored_tasks_solution(tmp_path):
    from coevolve.benchmarks.learning.tables import exploration_breadth
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    solution = json.dumps([[{"name": "get_balance", "arguments": {"account_id": "BIZ-7"}}]])
    task = {"task_id": "t", "env": "toolworld", "split": "train", "family": "bank_balance", "source": "benchmark",
            "turns": "[]", "initial_state": "{}", "solution": solution, "checker": "{}", "lineage": "{}"}  # fmt: skip

    def triple(i: int, group: str, tool: str, arguments: dict, ok: bool = True) -> dict:
        return {"triple_id": f"r{i}", "group_id": group, "exploration_id": group, "trajectory_id": "tr",
                "task_id": "t", "seq": i, "step": i, "call_index": 0, "turn": 0, "tool": tool,
                "arguments": json.dumps(arguments), "observation": "{}", "ok": ok, "state_before": None,
                "state_after": None, "changed": None}  # fmt: skip

    store = RunStore(RunLayout(tmp_path, "learning-coevolve-s0"))
    store.write(0, "bootstrap", "tasks", [task])
    store.write(0, "triples", "triples", [
        triple(0, "g1", "get_balance", {"account_id": "BIZ-7"}),  # the task's own call, twice
        triple(1, "g1", "get_balance", {"account_id": "BIZ-7"}),
        triple(2, "g2", "get_balance", {"account_id": "BIZ-7"}),
        triple(3, "g2", "get_balance", {"account_id": "SAV-2"}),  # new: other arguments
        triple(4, "g2", "list_accounts", {}),  # new: another tool
        triple(5, "g2", "teleport", {}, ok=False)])  # fmt: skip
    assert exploration_breadth(tmp_path, ["learning-coevolve-s0"]).to_dicts() == [
        {"run": "learning-coevolve-s0", "groups": 2, "calls": 4, "new_calls": 2}]
    assert exploration_breadth(tmp_path / "empty", ["learning-grpo-s0"]).height == 0


def test_quick_plan_runs_and_reports(tmp_path, monkeypatch, prefect_api):
    from coevolve.benchmarks.learning.arms import Plan
    from coevolve.benchmarks.learning.runs import run_benchmark

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "runs"))
    assert Plan.make(quick=True).arms == ("grpo", "coevolve") and Plan.make(quick=False).seeds == 3
    plan = Plan.make(quick=True, config=CONFIGS / "test-tiny.yaml", rounds=2, arms=["grpo", "coevolve", "no-verify"],
                     overrides=["evolve.every=1", "eval.splits=[test, heldout-templates]", "train.keep_checkpoints=1"],
                     warm_start_tasks=4, teacher_tasks=4)  # fmt: skip
    assert plan.runs() == [("grpo", 0), ("coevolve", 0), ("no-verify", 0)]
    text = run_benchmark(plan, tmp_path / "out")
    curves = pl.read_parquet(tmp_path / "out" / "curves.parquet")
    assert set(curves["arm"]) == {"grpo", "coevolve", "no-verify"}
    assert set(curves["updates"]) == {0, 1, 2} and set(curves["split"]) == {"test", "heldout-templates"}
    assert "coevolve - grpo" in text and "| learning-coevolve-s0 |" in text
    # every arm starts from the one warm-started checkpoint; the evolving arms share a teacher built from it
    checkpoint, teacher = sorted((tmp_path / "runs" / "warm-start").iterdir(), key=lambda p: p.name.startswith("teacher-"))
    assert teacher.name.startswith("teacher-") and json.loads((teacher / "warm_start.json").read_text())["start"] == f"warm-start/{checkpoint.name}"
    assert "warm start: 4 reference episodes" in text and str(checkpoint) in text and str(teacher) in text
    for arm in ("grpo", "coevolve", "no-verify"):
        saved = yaml.safe_load((tmp_path / "runs" / f"run=learning-{arm}-s0" / "config.yaml").read_text())
        assert saved["model"]["name"] == str(checkpoint)
        assert (saved["teacher"]["type"], saved["teacher"].get("model")) == (
            ("policy", None) if arm == "grpo" else ("local", str(teacher)))
    assert (tmp_path / "out" / "report.md").read_text() == text
    assert (tmp_path / "out" / "curves.png").stat().st_size > 1000
    # the report can be rebuilt from storage alone (nothing runs: the tables before the timings match)
    again = run_benchmark(plan, tmp_path / "again", run=False)
    assert again.split("## Per run")[0] == text.split("## Per run")[0]
    # ... and on a machine without the runs, from the outcomes the benchmark recorded next to its report
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "outcomes.parquet").write_bytes((tmp_path / "out" / "outcomes.parquet").read_bytes())
    shutil.copytree(tmp_path / "out" / "runs", tmp_path / "elsewhere" / "runs")
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "fresh-machine"))
    recorded = run_benchmark(plan, tmp_path / "elsewhere", run=False)
    assert "come from" in recorded
    assert recorded.split("## Per run")[0].split("## Held-out")[1] == text.split("## Per run")[0].split("## Held-out")[1]
    # ... per-run tables included: they were recorded beside the outcomes
    assert recorded.split("## Per run")[1] == text.split("## Per run")[1]
    # a record without them (written before they were kept) says where they are
    shutil.rmtree(tmp_path / "elsewhere" / "runs")
    older = run_benchmark(plan, tmp_path / "elsewhere", run=False)
    assert "have no per-run tables in" in older and "| learning-coevolve-s0 |" not in older
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "runs"))
    # every arm ran the same rollout budget
    from coevolve.storage.catalog import query

    budget = query(tmp_path / "runs", "SELECT run, count(*) AS n FROM trajectories WHERE source = 'rollout' "
                                      "GROUP BY run").to_pylist()  # fmt: skip
    assert len({row["n"] for row in budget}) == 1 and len(budget) == 3
    assert "## The teacher's explorations, its candidates and their verdicts" in text and "| new_calls |" in text
    # the evolving arms started as forks of grpo: round 0's rollout and update were computed once (the
    # arms forked grpo's round 0 before its later rounds pruned the round-0 checkpoint)
    for arm in ("coevolve", "no-verify"):
        for stage in ("rollout", "grpo_update", "evaluate"):
            manifest = tmp_path / "runs" / f"run=learning-{arm}-s0" / "round=0" / f"stage={stage}" / "_manifest.json"
            assert json.loads(manifest.read_text())["forked_from"] == "learning-grpo-s0"
    assert not (tmp_path / "runs" / "run=learning-grpo-s0" / "checkpoints" / "round=0").exists()


def test_evolving_arms_need_evolution_in_the_config():
    from coevolve.benchmarks.learning.arms import Plan
    from coevolve.benchmarks.learning.runs import run_benchmark

    with pytest.raises(ValueError, match="evolve.every"):
        run_benchmark(Plan.make(quick=True, config=CONFIGS / "test-tiny.yaml", arms=["coevolve"]), None)
    with pytest.raises(ValueError, match="unknown arms"):
        Plan.make(quick=True, arms=["bogus"])


def test_runs_in_parallel_processes_land_in_the_same_storage(tmp_path, monkeypatch, prefect_api):
    from coevolve.benchmarks.learning.arms import Plan
    from coevolve.benchmarks.learning.runs import run_benchmark

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "runs"))
    plan = Plan.make(quick=True, config=CONFIGS / "test-tiny.yaml", rounds=1, arms=["grpo", "coevolve"],
                     overrides=["evolve.every=1"], warm_start_tasks=0, teacher_tasks=0, jobs=2)  # fmt: skip
    text = run_benchmark(plan, tmp_path / "out")
    curves = pl.read_parquet(tmp_path / "out" / "curves.parquet")
    assert set(curves["arm"]) == {"grpo", "coevolve"} and set(curves["updates"]) == {0, 1}
    assert "| learning-grpo-s0 |" in text and "| learning-coevolve-s0 |" in text
    logs = sorted(p.name for p in (tmp_path / "runs" / "learning-logs").iterdir())
    assert logs == ["learning-coevolve-s0.log", "learning-grpo-s0.log"]


def test_a_failed_run_process_is_named_with_its_log(tmp_path, monkeypatch):
    import sys

    from coevolve.benchmarks.learning import runs
    from coevolve.benchmarks.learning.arms import Plan

    fake_command = lambda plan, arm, seed, root: [sys.executable, "-c", f"raise SystemExit({int(arm == 'grpo') * 3})"]  # noqa: E731
    monkeypatch.setattr(runs, "run_command", fake_command)
    plan = Plan.make(quick=True, jobs=2)
    with pytest.raises(RuntimeError, match=r"runs failed: learning-grpo-s0 \(exit 3, log .*learning-grpo-s0.log\)$"):
        runs.run_arms_in_processes(plan, tmp_path)
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        Plan.make(quick=True, jobs=0)


def test_bench_learning_quick_writes_next_to_the_runs_and_appends_a_result_row(tmp_path, monkeypatch, prefect_api):
    from coevolve.benchmarks.learning.cli import main
    from coevolve.benchmarks.record import RESULTS, read_results

    monkeypatch.setenv("COEVOLVE_BENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "elsewhere"))  # --root wins over it
    committed = {p: p.stat().st_mtime_ns for p in RESULTS.rglob("*") if p.is_file()}
    argv = ["--quick", "--config", str(CONFIGS / "test-tiny.yaml"), "--rounds", "1", "--set", "evolve.every=1",
            "--warm-start-tasks", "0", "--teacher-tasks", "0", "--root", str(tmp_path / "runs")]  # fmt: skip
    main(argv)
    assert (tmp_path / "runs" / "learning-report" / "report.md").exists()
    assert {p: p.stat().st_mtime_ns for p in RESULTS.rglob("*") if p.is_file()} == committed
    (row,) = read_results(tmp_path / "results")["learning"]
    assert row["variant"] == "quick" and row["command"].startswith("coevolve bench learning --quick")
    assert "coevolve - grpo, validation" in row["figures"]  # pilots evaluate validation; test needs a frozen plan
    assert row["figures"]["seeds"] == {"value": 1.0, "unit": ""}
    main([*argv, "--report-only"])  # a report of stored runs measures nothing new
    assert len(read_results(tmp_path / "results")["learning"]) == 1
    main([*argv, "--report-only", "--result-row", "--note", "seed 0 of a plan"])  # runs recorded over sittings
    again = read_results(tmp_path / "results")["learning"][-1]
    assert again["figures"] == row["figures"] and "--report-only --result-row" in again["command"]
    assert again["note"] == "seed 0 of a plan"
    with pytest.raises(SystemExit):
        main([*argv, "--result-row"])
