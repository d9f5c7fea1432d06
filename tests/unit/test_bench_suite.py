"""The benchmark suite: one registry behind `coevolve bench`, results as appended rows, and
`benchmarks/RESULTS.md` as the table those rows give."""

from __future__ import annotations

import importlib
import inspect
import json
import re

import pytest
from typer.testing import CliRunner

from coevolve.benchmarks.record import RESULTS, figure, read_results, record_result
from coevolve.benchmarks.report import current_rows, render
from coevolve.benchmarks.suite import BENCHMARKS, COMMANDS
from coevolve.cli import app


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_every_registered_benchmark_imports_with_an_entry_taking_argv_and_a_description(name):
    bench = BENCHMARKS[name]
    module = importlib.import_module(f"coevolve.benchmarks.{bench.module}")
    assert module.__doc__ and bench.description and name not in COMMANDS
    assert list(inspect.signature(module.main).parameters) == ["argv"]


def test_bench_list_names_every_benchmark_and_an_unknown_name_is_one_line():
    listed = CliRunner().invoke(app, ["bench", "list"])
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert [line.split()[0] for line in lines] == list(BENCHMARKS)
    assert all(BENCHMARKS[line.split()[0]].description in line for line in lines)
    unknown = CliRunner().invoke(app, ["bench", "no-such-benchmark"])
    assert unknown.exit_code == 2 and "coevolve bench list" in unknown.output and "Traceback" not in unknown.output


def test_bench_passes_its_arguments_through_to_the_benchmark():
    shown = CliRunner().invoke(app, ["bench", "learning", "--help"])
    assert shown.exit_code == 0
    for option in ("--quick", "--arm", "--arms", "--first-seed", "--out", "--set", "--root", "--no-share"):
        assert option in shown.output


def test_record_result_appends_one_well_formed_row(tmp_path):
    first = record_result("probe", {"latency": figure(1.23456789, "ms"), "delta": figure(1.4, "points", (-5.6, 8.3))},
                          command="coevolve bench probe --tasks 2", directory=tmp_path)  # fmt: skip
    record_result("probe", {"latency": figure(2, "ms")}, command="coevolve bench probe", variant="big",
                  note="shared machine", directory=tmp_path)  # fmt: skip
    lines = (tmp_path / "probe.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == first
    assert set(first) == {"benchmark", "variant", "date", "commit", "machine", "command", "figures"}
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", first["date"]) and first["commit"] and "core CPU" in first["machine"]
    assert first["figures"] == {"latency": {"value": 1.23457, "unit": "ms"},
                                "delta": {"value": 1.4, "unit": "points", "interval": [-5.6, 8.3]}}  # fmt: skip
    rows = read_results(tmp_path)["probe"]
    assert [r["variant"] for r in rows] == ["", "big"] and rows[1]["note"] == "shared machine"
    assert not list(tmp_path.glob(".*tmp"))  # the temporary file was renamed, not left behind


def test_record_result_refuses_a_figure_without_a_unit(tmp_path):
    with pytest.raises(ValueError, match="'latency' of probe"):
        record_result("probe", {"latency": 1.2}, command="coevolve bench probe", directory=tmp_path)
    assert not (tmp_path / "probe.jsonl").exists()


def test_the_report_shows_the_newest_row_of_each_variant(tmp_path):
    for value, variant in ((1.0, ""), (2.0, "bfcl"), (3.0, "")):
        record_result("zero-shot", {"success": figure(value, "%")}, command="coevolve bench zero-shot",
                      variant=variant, directory=tmp_path)  # fmt: skip
    rows = current_rows(read_results(tmp_path))
    assert sorted((r["variant"], r["figures"]["success"]["value"]) for r in rows) == [("", 3.0), ("bfcl", 2.0)]
    assert "success: 3 %" in render(read_results(tmp_path))


def test_a_retired_variant_leaves_the_report_and_its_history_stays(tmp_path, monkeypatch, capsys):
    from coevolve.benchmarks.report import main

    monkeypatch.setenv("COEVOLVE_BENCH_RESULTS", str(tmp_path / "results"))
    for value, variant in ((1.0, "old-protocol"), (2.0, "pilot")):
        record_result("learning", {"coevolve - grpo": figure(value, "points")}, command="coevolve bench learning",
                      variant=variant)  # fmt: skip
    out = tmp_path / "RESULTS.md"
    main(["--retire", "learning:old-protocol", "--because", "its tasks were replaced", "--out", str(out)])
    assert "retired learning (old-protocol)" in capsys.readouterr().out
    rows = read_results()["learning"]
    assert len(rows) == 3 and rows[-1]["retired"] == {"commit": rows[0]["commit"], "date": rows[0]["date"]}
    assert rows[-1]["note"] == "its tasks were replaced" and rows[-1]["command"].startswith("coevolve bench report")
    assert [r["variant"] for r in current_rows(read_results())] == ["pilot"]
    assert "old-protocol" not in out.read_text() and "learning (pilot)" in out.read_text()
    for argv, field in ((["--retire", "learning:old-protocol", "--because", "again"], "no standing figures"),
                        (["--retire", "learning:pilot"], "--because"), (["--because", "why"], "--retire")):  # fmt: skip
        with pytest.raises(SystemExit):
            main([*argv, "--out", str(out)])
        assert field in capsys.readouterr().err
    assert len(read_results()["learning"]) == 3  # a refused retirement appends nothing


def test_quick_learning_output_never_goes_to_the_committed_results_by_default(tmp_path):
    from coevolve.benchmarks.learning.cli import output_folder, parser

    for argv in (["--quick"], []):
        out = output_folder(parser().parse_args(argv), tmp_path / "runs")
        assert out == tmp_path / "runs" / "learning-report" and not out.resolve().is_relative_to(RESULTS.resolve())
    named = RESULTS / "learning" / "stand-ins-10-15"
    assert output_folder(parser().parse_args(["--quick", "--out", str(named)]), tmp_path) == named


def test_results_md_is_the_report_of_the_committed_rows():
    results = read_results(RESULTS)
    assert results, "no committed results"
    assert (RESULTS.parent / "RESULTS.md").read_text() == render(results), "run `coevolve bench report`"


def test_results_md_names_an_existing_command_for_every_benchmark_with_results():
    text = (RESULTS.parent / "RESULTS.md").read_text()
    for name, rows in read_results(RESULTS).items():
        assert name in BENCHMARKS, f"{name}.jsonl has no benchmark of that name"
        assert all(row["benchmark"] == name for row in rows)
        for row in current_rows({name: rows}):
            assert row["command"].startswith(f"coevolve bench {name}"), row["command"]
            assert f"`{row['command']}`" in text
            assert "/tmp/" not in row["command"], "a command that names a scratch path reproduces nothing"
