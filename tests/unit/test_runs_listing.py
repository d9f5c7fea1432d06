"""`coevolve runs` lists every readable run and names each unreadable one in a line of its own: one bad
manifest no longer hides the whole storage root."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.flows.summary import runs_overview
from tests.unit.test_cli import make_run


def test_one_bad_manifest_hides_no_other_run(tmp_path):
    for run in ("alpha", "gamma"):
        make_run(tmp_path, run)
    wrong_shape = make_run(tmp_path, "beta").manifest_path(0, "rollout")
    wrong_shape.write_text('{"artifacts": []}')
    wrong_value = make_run(tmp_path, "delta").manifest_path(0, "rollout")
    manifest = json.loads(wrong_value.read_text())
    manifest["outputs"]["success_rate"] = "most"  # a number is formatted as a percentage
    wrong_value.write_text(json.dumps(manifest))

    result = CliRunner().invoke(app, ["runs", "--root", str(tmp_path)], terminal_width=400)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    listed = [line.split()[0] for line in result.output.splitlines() if line.split()[:1] in (["alpha"], ["gamma"])]
    assert listed == ["alpha", "gamma"], result.output
    named = [line for line in result.output.splitlines() if line.startswith("error: run ")]
    assert len(named) == 2, result.output
    assert "'beta'" in named[0] and str(wrong_shape) in named[0] and "is not a stage manifest" in named[0]
    assert "'delta'" in named[1] and "a stage manifest under it holds a value of the wrong type" in named[1]


def test_the_overview_collects_unreadable_runs_when_asked(tmp_path):
    make_run(tmp_path, "alpha")
    make_run(tmp_path, "beta").manifest_path(0, "rollout").write_text("[1, 2]")
    unreadable: list[str] = []
    assert [row["run"] for row in runs_overview(tmp_path, unreadable=unreadable)] == ["alpha"]
    assert len(unreadable) == 1 and "'beta'" in unreadable[0]


def test_a_run_name_stays_whole_at_80_columns(tmp_path):
    """`coevolve runs | grep NAME` finds the run however many columns the table has (a wrapped name would not
    be found: the disk column once squeezed `test-tiny` into `test-t` / `iny`)."""
    make_run(tmp_path, "test-tiny-longer")
    result = CliRunner().invoke(app, ["runs", "--root", str(tmp_path)], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert any(line.split()[:1] == ["test-tiny-longer"] for line in result.output.splitlines()), result.output
