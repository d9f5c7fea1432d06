"""Experiment tracking (`flows.tracking`): `tracking.report_to` parsing, one line naming the extra when the
tracker is missing, and TensorBoard event files read back through tensorboard's own EventAccumulator, one
point per round however often a round is reported."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coevolve.config import ConfigError, parse_config
from coevolve.storage.layout import RunLayout
from tests.conftest import CONFIGS

TENSORBOARD = ["tracking.report_to=[tensorboard]"]


def logged_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files under `folder`: tag -> [(step, value)] in the order written."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def row(round_: int, **values) -> dict:
    return {"round": round_, "train_success": 0.25 * round_, "train_reward": None, "loss": -0.5 + round_,
            "dataset_size": 40 + round_, **values}  # fmt: skip


def test_report_to_is_none_by_default_and_takes_a_name_or_a_list():
    assert parse_config({}, source="t").tracking.report_to == ()
    assert parse_config({"tracking": {"report_to": "none"}}, source="t").tracking.report_to == ()
    assert parse_config({"tracking": {"report_to": "tensorboard"}}, source="t").tracking.report_to == ("tensorboard",)
    with pytest.raises(ConfigError, match=r"tracking\.report_to"):
        parse_config({"tracking": {"report_to": ["wandb"]}}, source="t")


def test_tracking_is_in_no_stage_cache_key():
    from coevolve.stages import STAGES

    assert not [s.name for s in STAGES.values() if any(p.split(".")[0] == "tracking" for p in s.config)]


def test_each_round_is_logged_once_with_the_round_metrics_names(tmp_path):
    from coevolve.flows.tracking import track_rounds

    cfg = parse_config({}, source="t", overrides=TENSORBOARD)
    layout = RunLayout(tmp_path, "r")
    assert track_rounds(cfg, layout, [row(0), row(1)]) == {"tensorboard": [0, 1]}
    assert track_rounds(cfg, layout, [row(0), row(1)]) == {"tensorboard": []}  # a cached re-run
    assert track_rounds(cfg, layout, [row(2)]) == {"tensorboard": [2]}
    logged = logged_scalars(tmp_path / "run=r" / "tracking" / "tensorboard")
    assert set(logged) == {"train_success", "loss", "dataset_size"}  # None is no point
    assert logged["train_success"] == [(0, 0.0), (1, 0.25), (2, 0.5)]
    assert logged["loss"] == [(0, -0.5), (1, 0.5), (2, 1.5)]
    assert logged["dataset_size"] == [(0, 40), (1, 41), (2, 42)]


def test_no_tracker_writes_nothing(tmp_path):
    from coevolve.flows.tracking import track_rounds

    assert track_rounds(parse_config({}, source="t"), RunLayout(tmp_path, "r"), [row(0)]) == {}
    assert not (tmp_path / "run=r" / "tracking").exists()


def test_a_missing_tracker_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from coevolve.flows.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    result = CliRunner().invoke(app, ["run", str(CONFIGS / "test-tiny.yaml"), "--set", TENSORBOARD[0],
                                      "--root", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip() == ("error: tracking.report_to: tensorboard is not installed; "
                                     "pip install 'coevolve[tensorboard]'")  # fmt: skip
    assert not list(tmp_path.glob("run=*/round=*"))  # refused before anything ran
