"""`coevolve compare`: the same config run twice writes the same artifacts and checkpoints (the check a
behaviour-preserving change passes), and a changed output or a missing stage is named, with exit 1."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from tests.conftest import run_evolved

pytestmark = pytest.mark.slow


def compare(root, left: str, right: str, other_root=None):
    args = ["compare", left, right, "--root", str(root)] + (["--other-root", str(other_root)] if other_root else [])
    return CliRunner().invoke(app, args, terminal_width=200)


def test_an_evolving_run_computed_again_writes_identical_outputs(evolved_run, tmp_path, prefect_api):
    run_evolved(tmp_path, "evo")  # the same name: rows and ids carry the run's name
    result = compare(evolved_run.root, "evo", "evo", other_root=tmp_path)
    assert result.exit_code == 0, result.output
    compared = int(result.output.split(" outputs compared")[0].split()[-1])
    assert compared > 50 and "0 differ; 0 cache keys differ" in result.output  # every stage, checkpoints too


def test_a_changed_artifact_and_a_missing_stage_are_named(evolved_run, tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(evolved_run.root / "run=evo", copy / "run=evo")
    manifest_path = copy / "run=evo" / "round=1" / "stage=merge" / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    name = next(iter(manifest["artifacts"]))
    manifest["artifacts"][name]["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    shutil.rmtree(copy / "run=evo" / "round=1" / "stage=evaluate")

    result = compare(evolved_run.root, "evo", "evo", other_root=copy)
    assert result.exit_code == 1, result.output
    assert f"round 1 merge: artifact {name}: " in result.output and "!= 0000000000000000" in result.output
    assert "round 1 evaluate: stage: ran != absent" in result.output
    assert "2 differ" in result.output
