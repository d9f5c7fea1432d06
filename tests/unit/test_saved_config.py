"""A run's saved config is checked on every continue: empty, partial or unparsable is refused in one line
naming the file, and nothing is deleted or rewritten (it used to become the package defaults, which
recomputed every stage and overwrote the file)."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.config import load_config
from coevolve.flows.runs import RunError, check_compatible, resolve_run
from coevolve.storage.layout import RunLayout
from tests.conftest import CONFIGS

BROKEN = {
    "empty": ("", "is empty"),
    "blank": ("# emptied\n\n", "is empty"),
    "partial": ("run: {name: x, rounds: 3}\n", "is partial (no model, env, dataset, rollout, train, eval, evolve"),
    "empty section": (None, "is partial (no train section)"),  # a full file whose train is `{}`
    "unparsable": ("run: {name: x\nmodel: [", "is not valid YAML ("),
    "not a mapping": ("- run\n- model\n", "is not a mapping of sections"),
}


def saved_run(root, text: str | None) -> RunLayout:
    """A run `x` with a stage file and a saved config (`text`; None: test-tiny's with `train: {}`)."""
    layout = RunLayout(root, "x")
    stage = layout.run_dir / "round=0" / "stage=rollout" / "samples.parquet"
    stage.parent.mkdir(parents=True)
    stage.write_bytes(b"rows")
    if text is None:
        data = load_config(CONFIGS / "test-tiny.yaml").model_dump(mode="json")
        text = yaml.safe_dump({**data, "train": {}}, sort_keys=False)
    layout.config_path.write_text(text)
    return layout


def untouched(layout: RunLayout, text: str) -> bool:
    stage = layout.run_dir / "round=0" / "stage=rollout" / "samples.parquet"
    return layout.config_path.read_text() == text and stage.read_bytes() == b"rows"


@pytest.mark.parametrize("case", list(BROKEN))
def test_continuing_from_a_broken_saved_config_is_refused_naming_the_file(tmp_path, monkeypatch, case):
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    layout = saved_run(tmp_path, BROKEN[case][0])
    text = layout.config_path.read_text()
    with pytest.raises(RunError) as refused:
        resolve_run(None, "x", [])
    message = str(refused.value)
    assert message.startswith(f"{layout.config_path}: the saved config of run 'x' {BROKEN[case][1]}"), message
    assert "\n" not in message and "nothing was changed" in message
    with pytest.raises(RunError, match="the saved config of run 'x'"):  # a config file cannot be compared with it
        check_compatible(layout, load_config(CONFIGS / "test-tiny.yaml"), config_source="test-tiny.yaml")
    assert untouched(layout, text)


def test_coevolve_run_of_an_emptied_config_exits_2_and_keeps_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    layout = saved_run(tmp_path, "")
    for args in (["run", "--run", "x"], ["stage", "rollout", "--run", "x", "--round", "0"]):
        result = CliRunner().invoke(app, [*args, "--root", str(tmp_path)], terminal_width=400)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {layout.config_path}: the saved config of run 'x' is empty")
        assert untouched(layout, "")


def test_a_complete_saved_config_continues_and_an_older_one_without_later_sections_too(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    cfg = load_config(CONFIGS / "test-tiny.yaml")
    older = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in ("tracking", "warm_start")}
    layout = saved_run(tmp_path, yaml.safe_dump(older, sort_keys=False))
    assert resolve_run(None, "x", []).config == cfg
    assert resolve_run(None, "x", ["rollout.k=2"]).config.rollout.k == 2
    check_compatible(layout, cfg, config_source="test-tiny.yaml")
