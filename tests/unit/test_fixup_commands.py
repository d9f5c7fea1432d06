"""What the commands print for a user to act on is right for where the runs are and what happened: fix-up
commands keep `--root`; `coevolve stage` prints the artifact paths of the folder the run is in now; a round
line says "cached" only when nothing was recomputed; a run continued without `--rounds` keeps its rounds;
CSV output tells an escaped control character from the same text written out."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.config import load_config
from coevolve.flows.coevolve import save_resolved_config
from coevolve.flows.render import unreadable_notes
from coevolve.flows.run_context import open_run
from coevolve.flows.runs import rounds_to_run
from coevolve.flows.summary import round_line
from coevolve.pipeline.runner import run_stage
from coevolve.stages.round_plan import round_plan
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import FileRef, Manifest
from coevolve.storage.parquet import ArtifactError
from tests.conftest import CONFIGS
from tests.unit.test_cli import context, make_run

CONFIG = load_config(CONFIGS / "test-tiny.yaml")


@pytest.fixture(autouse=True)
def _default_root_elsewhere(monkeypatch, tmp_path):
    """The runs of these tests are not under the default storage root, so commands need `--root`."""
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "default-root"))


def test_the_rebuild_command_of_a_corrupt_artifact_keeps_the_root(tmp_path):
    path = tmp_path / "my runs" / "run=demo" / "round=1" / "stage=rollout" / "steps.parquet"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PAR1 cut")
    (note,) = unreadable_notes([path])
    assert f"`coevolve stage rollout --run demo --round 1 --force --root '{tmp_path / 'my runs'}'`" in note


def test_a_missing_artifact_names_the_command_with_its_root(tmp_path):
    from coevolve.storage.store import RunStore

    store = RunStore(RunLayout(tmp_path / "runs", "demo"))
    with pytest.raises(ArtifactError) as raised:
        store.completed(1, "rollout")
    assert f"`coevolve stage rollout --run demo --round 1 --force --root {tmp_path / 'runs'}`" in str(raised.value)


def test_a_missing_checkpoint_names_the_command_with_its_root(tmp_path):
    from coevolve.agents.policy import checkpoint_errors

    checkpoint = tmp_path / "runs" / "run=demo" / "checkpoints" / "round=3"
    with pytest.raises(ArtifactError) as raised, checkpoint_errors(checkpoint, "r3-abc"):
        raise FileNotFoundError(checkpoint / "model.safetensors")
    assert f"coevolve stage grpo_update --run demo --round 3 --force --root {tmp_path / 'runs'}`" in str(raised.value)


def test_a_refused_checkpoint_names_the_command_with_its_root(tmp_path):
    layout = make_run(tmp_path / "runs", rounds=1)
    folder = layout.checkpoint_dir(0)
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"other weights")
    manifest = Manifest.read(layout.manifest_path(0, "grpo_update"))
    manifest.outputs |= {"checkpoint": "checkpoints/round=0"}
    manifest.files = {"checkpoints/round=0": {"model.safetensors": FileRef("0" * 64, 13, 0)}}
    manifest.write(layout.manifest_path(0, "grpo_update"))
    with pytest.raises(ArtifactError, match="is refused") as raised:
        context(layout).checked_policy_after(0)
    assert f"--round 0 --force --root {tmp_path / 'runs'}`" in str(raised.value)


def test_stage_prints_the_paths_of_the_folder_the_run_is_in_now(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    ctx = open_run(CONFIG, "moved", tmp_path / "before", quiet=True)
    save_resolved_config(ctx)
    run_stage(round_plan(CONFIG, 0)[0], ctx, 0)
    shutil.move(tmp_path / "before", tmp_path / "after")
    result = CliRunner().invoke(app, ["stage", "bootstrap", "--run", "moved", "--round", "0",
                                      "--root", str(tmp_path / "after")], terminal_width=400)  # fmt: skip
    assert result.exit_code == 0, result.output
    shown = [line.split(" -> ")[1] for line in result.output.splitlines() if " rows -> " in line]
    after = RunLayout(tmp_path / "after", "moved")
    assert shown and all(Path(path).is_file() for path in shown), result.output
    assert sorted(shown) == sorted(str(after.artifact_path(0, "bootstrap", Path(p).stem)) for p in shown)
    assert str(tmp_path / "before") not in result.output


ROW = {"round": 1, "train_success": 0.5, "train_reward": 0.5, "forgetting_signals": None, "boundary_signals": None,
       "rare_signals": None, "dataset_size": 40, "loss": None}  # fmt: skip
STAGES = ["rollout", "signals", "explore", "abstract", "verify", "merge", "grpo_update", "evaluate"]


def test_a_round_line_says_cached_only_when_nothing_was_recomputed():
    recomputed = round_line(ROW, STAGES[1:], computed=["rollout"])
    assert not recomputed.endswith("| cached") and "computed: rollout" in recomputed
    assert round_line(ROW, STAGES, computed=[]).endswith("| cached")
    assert not round_line(ROW, STAGES[1:]).endswith("| cached")  # not told what was computed: names them
    assert round_line(ROW, ["signals"], computed=STAGES[2:]).endswith("cached: signals")


def test_a_run_continued_without_rounds_keeps_the_rounds_it_has(tmp_path):
    layout = make_run(tmp_path, rounds=3)  # taken to 3 rounds with --rounds 3; its config says 2
    ctx = context(layout)
    assert ctx.config.run.rounds == 2
    assert rounds_to_run(ctx, None, None) == 3
    assert rounds_to_run(ctx, 2, None) == 2  # asked for explicitly


def test_csv_tells_an_escape_character_from_the_same_text(tmp_path):
    statement = r"SELECT chr(27) || '[31m' AS a, '\x1b[31m' AS b, '\' || chr(27) AS c, '\\x1b' AS d, 'C:\new' AS e"
    result = CliRunner().invoke(app, ["sql", statement, "--format", "csv", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    header, row = list(csv.reader(io.StringIO(result.output)))
    assert header == ["a", "b", "c", "d", "e"] and "\x1b" not in result.output
    assert row == ["\\x1b[31m", "\\\\x1b[31m", "\\\\\\x1b", "\\\\\\\\x1b", "C:\\new"]
    assert len(set(row[:4])) == 4
