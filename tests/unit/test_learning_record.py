"""The learning benchmark's per-run record (`benchmarks/learning/run_record.py`): a run measured again
replaces its rows under its plan, every other recorded row is kept, and a finished run's wall time is not
overwritten by the seconds a later invocation spent finding it finished."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from coevolve.benchmarks.learning.run_record import RECORD, merge_table, read_record

REPOSITORY = Path(__file__).resolve().parents[2]


def test_a_run_measured_again_replaces_its_rows_and_nothing_else_recorded_is_lost():
    recorded = pl.DataFrame({"run": ["a", "b", "a"], "plan": ["p1", "p1", "p2"], "admitted": [1, 2, 3],
                             "wall_s": [900.0, 800.0, 700.0]})  # fmt: skip
    fresh = pl.DataFrame({"run": ["a", "c"], "admitted": [5, 6], "wall_s": [4.0, 600.0], "revisited": [1, 1]})
    merged = merge_table(fresh, recorded, ["a", "c"], "p1", wall_kept=True)
    rows = {(r["run"], r["plan"]): (r["admitted"], r["wall_s"], r["revisited"]) for r in merged.to_dicts()}
    assert rows == {("a", "p1"): (5, 900.0, 1),  # measured again; the wall of the invocation that computed it
                    ("b", "p1"): (2, 800.0, None),  # not in this storage root: as recorded
                    ("a", "p2"): (3, 700.0, None),  # another plan's run of the same name: kept
                    ("c", "p1"): (6, 600.0, 1)}
    assert merge_table(fresh, None, ["a", "c"], "p1")["plan"].to_list() == ["p1", "p1"]


def test_an_unreadable_or_foreign_record_is_named(tmp_path):
    assert read_record(tmp_path / "none.parquet") is None
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="bad.parquet: not a readable Parquet file"):
        read_record(tmp_path / "bad.parquet")
    pl.DataFrame({"run": ["x"]}).write_parquet(tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="other.parquet: not a per-run table"):
        read_record(tmp_path / "other.parquet")


def test_a_run_re_scored_on_an_unused_environment_seed_is_shown_beside_its_own_split(tmp_path):
    import json

    from coevolve.benchmarks.learning.report import rescored_section
    from coevolve.benchmarks.learning.tables import rescored

    folder = tmp_path / "evaluations" / "coverage-coevolve-s0" / "round=7-0123456789ab"
    folder.mkdir(parents=True)
    (folder / "evaluation.json").write_text(json.dumps({
        "run": "coverage-coevolve-s0", "round": 7, "env": "toolworld", "options": {"seed": 9001},
        "tasks": {"gap-validation": 40}, "success": {"gap-validation": 0.25}}))  # fmt: skip
    table = rescored(tmp_path, ["coverage-coevolve-s0", "coverage-grpo-s0"])
    assert table.select("run", "split", "tasks", "success").rows() == [
        ("coverage-coevolve-s0", "gap-validation", 40, 0.25)]
    evals = pl.DataFrame({"run": ["coverage-coevolve-s0"] * 2, "updates": [8, 8], "split": ["gap-validation"] * 2,
                          "success": [1.0, 0.0]})  # fmt: skip
    section = "\n".join(rescored_section(table, evals, rounds=8))
    assert '| coverage-coevolve-s0 | 7 | {"seed": 9001} | gap-validation | 40 | 25.0 % | 50.0 % |' in section
    assert rescored_section(rescored(tmp_path, ["coverage-grpo-s0"]), evals, rounds=8) == []


@pytest.mark.skipif(shutil.which("git") is None or not (REPOSITORY / ".git").exists(), reason="not a git checkout")
def test_a_plans_per_run_record_is_committed_with_its_outcomes_not_ignored_by_git():
    record = f"benchmarks/results/learning/any-plan/{RECORD}/per_run.parquet"
    ignored = subprocess.run(["git", "check-ignore", "-q", record], cwd=REPOSITORY)
    assert ignored.returncode == 1, f"{record} is ignored by .gitignore: the record would never be committed"
    # ... while a run's storage under the default root stays out of the repository
    assert subprocess.run(["git", "check-ignore", "-q", "runs/demo/x.parquet"], cwd=REPOSITORY).returncode == 0


def test_a_report_of_a_plan_with_no_outcomes_says_why_in_one_line(tmp_path, capsys):
    from coevolve.benchmarks.learning.cli import main
    from coevolve.benchmarks.learning.outcomes import OUTCOMES

    out = tmp_path / "record"
    out.mkdir()
    pl.DataFrame({"run": ["learning-grpo-s0"], "arm": ["grpo"], "seed": [0], "updates": [2], "split": ["test"],
                  "task_id": ["t"], "family": ["f"], "success": [1.0], "plan": ["another-plan"], "code": [None]},
                 schema_overrides={"code": pl.String}).write_parquet(out / OUTCOMES)  # fmt: skip
    with pytest.raises(SystemExit):
        main(["--quick", "--arms", "grpo", "--root", str(tmp_path / "empty"), "--out", str(out), "--report-only"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "nothing to report: no run of this plan (grpo s0)" in error
    assert f"{out / OUTCOMES} records none of them" in error and "it holds plans: another-plan" in error
    assert not (out / "report.md").exists() and pl.read_parquet(out / OUTCOMES)["plan"].to_list() == ["another-plan"]


def test_report_tables_show_counts_of_thousands_whole_with_separators():
    from coevolve.benchmarks.learning.report import markdown_table

    table = pl.DataFrame({"arm": ["grpo"], "tokens": [91457.0], "stage s": [512.34], "feedback": [0.163],
                          "seeds": [2], "episodes": [1728]})  # fmt: skip
    assert markdown_table(table, percent=("feedback",)).splitlines()[2] == "| grpo | 91,457 | 512.3 | 16.3 % | 2 | 1,728 |"


def test_the_result_rows_mcnemar_p_values_name_the_splits_they_are_over():
    """The coverage plan's row read "coevolve - grpo, McNemar p: 0.603" over all three splits, unlabelled,
    where gap-test alone gives 4.5e-6: each p-value now names its splits."""
    from coevolve.benchmarks.learning.cli import headline_figures

    outcomes = pl.read_parquet(REPOSITORY / "benchmarks/results/learning/coverage-final/outcomes.parquet")
    figures = headline_figures(outcomes, ["grpo", "coevolve"], 8)
    assert round(figures["coevolve - grpo, McNemar p, all splits"]["value"], 3) == 0.603
    assert figures["coevolve - grpo, McNemar p, gap-test"]["value"] < 1e-5
    assert not [name for name in figures if name.endswith("McNemar p")]
