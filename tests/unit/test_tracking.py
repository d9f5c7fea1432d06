"""Experiment tracking (`flows.tracking`): `tracking.report_to` parsing (`all`, one line for an unknown or
missing tracker), TRL's names on TRL's global step (per-round figures at the round's last optimizer step),
the whole config as hparams once with the metrics the HParams tab shows, the tracking choice kept by the
run's saved config, and each
tracker's files read back with the tracker's own reader: TensorBoard's EventAccumulator, trackio's SQLite
store, W&B's offline transaction log. The round line warns when an update had no group with signal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.config import ConfigError, parse_config
from coevolve.flows.summary import round_line, run_metrics
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS

TENSORBOARD = ["tracking.report_to=[tensorboard]"]
STEP_TAGS = {"train/loss", "train/grad_norm", "train/learning_rate", "train/clip_ratio", "train/clip_ratio/low_mean",
             "train/clip_ratio/high_mean", "train/kl", "train/entropy", "train/completion_length"}  # fmt: skip


def logged_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files under `folder`: tag -> [(step, value)] in the order written."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def logged_hparams(folder) -> list[dict]:
    """The hparams of every HParams session start in the event files of `folder`."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    sessions = []
    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == "_hparams_/session_start_info":
                    data = HParamsPluginData.FromString(value.metadata.plugin_data.content).session_start_info
                    sessions.append({k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                                     for k, v in data.hparams.items()})  # fmt: skip
    return sessions


def step(loss: float, lr: float = 1e-5) -> dict:
    return {"loss": loss, "pg_loss": loss, "kl": 0.01, "clip_ratio": 0.1, "clip_ratio_low": 0.04,
            "clip_ratio_high": 0.06, "ratio_mean": 1.0, "entropy": 1.5, "completion_length": 12.0,
            "grad_norm": 0.5, "learning_rate": lr}  # fmt: skip


EVOLUTION = ("forgetting_signals", "boundary_signals", "rare_signals", "added_tasks", "dataset_size")
UPDATES = {0: [step(0.5), step(0.25)], 1: [], 2: [step(0.125)]}  # round 1: no group with signal


def tracked_run(root: Path, rounds: int = 3) -> RunLayout:
    """A run's manifests: rollout, grpo_update (with per-step records) and evaluate for each round."""
    layout = RunLayout(root, "r")
    for r in range(rounds):
        outputs = {"rollout": {"success_rate": 0.25 * r, "mean_reward": 0.5},
                   "grpo_update": {"loss": 0.1, "kl": 0.01, "groups": 4, "groups_with_signal": 2 if UPDATES[r] else 0,
                                   "steps": UPDATES[r]},
                   "evaluate": {"test_success": 0.5 + 0.125 * r},
                   "signals": {"forgetting_signals": r, "boundary_signals": 1, "rare_signals": 0},
                   "merge": {"added_tasks": r, "dataset_size": 40 + r}}  # fmt: skip
        for stage, out in outputs.items():
            Manifest(stage, "r", r, "k", 1, outputs=out).write(layout.manifest_path(r, stage))
    return layout


def track(layout: RunLayout, rounds: int, tracker: str = "tensorboard") -> dict[str, list[int]]:
    from coevolve.flows.tracking import track_rounds

    cfg = parse_config({}, source="t", overrides=[f"tracking.report_to=[{tracker}]"])
    return track_rounds(cfg, layout, run_metrics(RunStore(layout), rounds))


def test_report_to_takes_none_a_name_a_list_or_all_and_refuses_others_in_one_line():
    def report_to(value):
        return parse_config({"tracking": {"report_to": value}}, source="t").tracking.report_to

    assert parse_config({}, source="t").tracking.report_to == ()
    assert report_to("none") == ()
    assert report_to("tensorboard") == ("tensorboard",)
    assert report_to(["trackio", "wandb"]) == ("trackio", "wandb")
    assert report_to("all") == ("all",)
    with pytest.raises(ConfigError, match=r"tracking\.report_to") as refused:
        report_to(["mlflow"])
    assert "\n" not in str(refused.value)


def test_all_is_every_installed_tracker(monkeypatch):
    import importlib.util

    from coevolve.flows import tracking

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("trackio", "wandb") else real(name, *a))
    assert tracking.trackers(parse_config({"tracking": {"report_to": "all"}}, source="t")) == ("tensorboard",)


def test_tracking_is_in_no_stage_cache_key():
    from coevolve.stages.round_plan import STAGES

    assert not [s.name for s in STAGES.values() if any(p.split(".")[0] == "tracking" for p in s.config)]


def test_optimizer_steps_and_rounds_reach_tensorboard_under_trl_names(tmp_path):
    layout = tracked_run(tmp_path)
    assert track(layout, 2) == {"tensorboard": [0, 1]}
    assert track(layout, 2) == {"tensorboard": []}  # a cached re-run
    assert track(layout, 3) == {"tensorboard": [2]}  # a continued run: the global step goes on
    logged = logged_scalars(tmp_path / "run=r" / "tracking" / "tensorboard")
    assert set(logged) == STEP_TAGS | {"train/round", "train/success", "train/reward", "train/frac_groups_with_signal",
                                       "eval/test/success"} | {f"evolution/{n}" for n in EVOLUTION}  # fmt: skip
    assert logged["train/loss"] == [(1, 0.5), (2, 0.25), (3, 0.125)]  # round 1 took no step
    assert logged["train/learning_rate"] == [(s, pytest.approx(1e-5)) for s in (1, 2, 3)]
    assert logged["train/clip_ratio/low_mean"][0] == (1, pytest.approx(0.04))
    # per-round figures on the same global step, at the round's last optimizer step (round 1: none of its own)
    assert logged["train/round"] == [(2, 0), (2, 1), (3, 2)]
    assert logged["train/frac_groups_with_signal"] == [(2, 0.5), (2, 0.0), (3, 0.5)]
    assert logged["eval/test/success"] == [(2, 0.5), (2, 0.625), (3, 0.75)]
    assert logged["train/success"] == [(2, 0.0), (2, 0.25), (3, 0.5)]
    assert logged["evolution/dataset_size"] == [(2, 40), (2, 41), (3, 42)]


def test_a_run_without_optimizer_steps_logs_its_rounds_at_step_zero(tmp_path):
    from coevolve.flows.tracking import round_points

    (point,) = round_points({0: []}, {"round": 0, "train_success": 0.5})
    assert (point.axis, point.step, point.values) == ("train/global_step", 0, {"train/round": 0.0, "train/success": 0.5})


def logged_hparam_metrics(folder) -> list[str]:
    """The metric columns of the HParams tab (the experiment's metric infos) in the event files of `folder`."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    for path in sorted(Path(folder).glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == "_hparams_/experiment":
                    experiment = HParamsPluginData.FromString(value.metadata.plugin_data.content).experiment
                    return [m.name.tag for m in experiment.metric_infos]
    return []


def test_hparams_are_logged_once_per_run(tmp_path):
    layout = tracked_run(tmp_path)
    track(layout, 1)
    track(layout, 3)
    (hparams,) = logged_hparams(tmp_path / "run=r" / "tracking" / "tensorboard")
    defaults = parse_config({}, source="t")
    assert hparams["train.lr"] == pytest.approx(defaults.train.lr) and hparams["rollout.k"] == defaults.rollout.k
    assert hparams["model.name"] == defaults.model.name and hparams["train.loss_normalization"] == "batch_tokens"


def test_hparams_hold_every_section_and_the_hparams_tab_has_metrics(tmp_path):
    from coevolve.flows.tracking import track_rounds

    cfg = parse_config({}, source="t", overrides=[*TENSORBOARD, "explore.rounds=3", "evolve.every=1"])
    track_rounds(cfg, tracked_run(tmp_path), run_metrics(RunStore(RunLayout(tmp_path, "r")), 3))
    folder = tmp_path / "run=r" / "tracking" / "tensorboard"
    (hparams,) = logged_hparams(folder)
    assert hparams["explore.rounds"] == 3 and hparams["evolve.every"] == 1  # a fork's explore.rounds shows
    assert {key.split(".")[0] for key in hparams} >= {"run", "model", "env", "rollout", "train", "eval", "evolve",
                                                      "signals", "explore", "abstract", "verify", "merge"}  # fmt: skip
    assert {"train/reward", "train/success", "train/loss", "eval/test/success"} <= set(logged_hparam_metrics(folder))


def test_a_warm_started_model_is_named_by_its_config_name_and_its_start_is_its_own_hparam():
    from coevolve.flows.tracking import run_hparams

    spec = parse_config({}, source="t")
    named = spec.model_copy(update={"model": spec.model.model_copy(update={"name": "warm-start/7007e999632e"})})
    hparams = run_hparams(named, spec)
    assert hparams["model.name"] == spec.model.name
    assert hparams["model.warm_start"] == "warm-start/7007e999632e"
    assert "model.warm_start" not in run_hparams(spec, spec)


def test_the_tracking_choice_is_saved_with_the_run(tmp_path):
    from coevolve.flows.runs import resolve_run
    from coevolve.flows.tracking import save_tracking_choice

    layout = RunLayout(tmp_path, "r")
    layout.config_path.parent.mkdir(parents=True)
    layout.config_path.write_text(parse_config({}, source="t").to_yaml())
    chosen = resolve_run(None, "r", TENSORBOARD, root=tmp_path)  # `coevolve run --run r --more 0 --set ...`
    assert save_tracking_choice(chosen.config, layout)
    assert resolve_run(None, "r", [], root=tmp_path).config.tracking.report_to == ("tensorboard",)  # no --set
    assert not save_tracking_choice(chosen.config, layout)  # already saved: the file is left alone


def test_no_tracker_writes_nothing(tmp_path):
    from coevolve.flows.tracking import track_rounds

    layout = tracked_run(tmp_path)
    assert track_rounds(parse_config({}, source="t"), layout, run_metrics(RunStore(layout), 3)) == {}
    assert not (tmp_path / "run=r" / "tracking").exists()


def test_the_round_line_warns_when_an_update_had_no_group_with_signal(tmp_path):
    rows = run_metrics(RunStore(tracked_run(tmp_path)), 3)
    assert [r["groups_with_signal"] for r in rows] == [2, 0, 2]
    warning = "warning: no group with signal (every group's rewards equal), nothing to learn"
    assert [warning in round_line(r) for r in rows] == [False, True, False]
    assert warning not in round_line({**rows[1], "groups_with_signal": None})  # no update that round


def test_a_missing_tracker_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from coevolve.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    result = CliRunner().invoke(app, ["run", str(CONFIGS / "test-tiny.yaml"), "--set", TENSORBOARD[0],
                                      "--root", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip() == ("error: tracking.report_to: tensorboard is not installed; "
                                     "pip install 'coevolve[tensorboard]'")  # fmt: skip
    assert not list(tmp_path.glob("run=*/round=*"))  # refused before anything ran


TRACKIO_READ_BACK = """
import json, sys
from pathlib import Path
from tests.unit.test_tracking import RunLayout, track
track(RunLayout(Path(sys.argv[1]), "r"), 2, "trackio")
track(RunLayout(Path(sys.argv[1]), "r"), 3, "trackio")  # the run resumed
from trackio.sqlite_storage import SQLiteStorage
print(json.dumps({"logs": SQLiteStorage.get_logs("coevolve", "r"), "config": SQLiteStorage.get_run_config("coevolve", "r")}))
"""


def test_trackio_gets_the_steps_rounds_and_hparams(tmp_path):
    pytest.importorskip("trackio", reason="trackio not installed (pip install 'coevolve[trackio]')")
    tracked_run(tmp_path)
    store = tmp_path / "trackio"  # trackio fixes its store at import: a fresh process, pointed here
    env = {"TRACKIO_DIR": str(store), "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", TRACKIO_READ_BACK, str(tmp_path)], capture_output=True, text=True,
                          env={**__import__("os").environ, **env}, timeout=120, check=True)  # fmt: skip
    read = json.loads(done.stdout.strip().splitlines()[-1])
    losses = [(log["step"], log["train/loss"]) for log in read["logs"] if "train/loss" in log]
    assert losses == [(1, 0.5), (2, 0.25), (3, 0.125)]
    assert [(log["step"], log["eval/test/success"]) for log in read["logs"] if "eval/test/success" in log] == [
        (2, 0.5), (2, 0.625), (3, 0.75)]  # fmt: skip
    assert read["config"]["train.lr"] == pytest.approx(parse_config({}, source="t").train.lr)
    assert not list(tmp_path.glob("run=r/tracking/trackio"))  # trackio's own store, not the run's folder


def wandb_records(path: Path) -> list:
    """The protobuf records of a W&B transaction log (`run-<id>.wandb`: a 7-byte header, then LevelDB-style
    chunks of at most 32 KiB blocks, each with a 7-byte header: crc, length, type full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, parts, out = path.read_bytes(), 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        payload, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        parts = payload if kind in (1, 2) else parts + payload
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            out.append(record)
    return out


def test_wandb_offline_gets_the_steps_rounds_and_hparams(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb not installed (pip install 'coevolve[wandb]')")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    track(tracked_run(tmp_path), 3, "wandb")
    (log,) = (tmp_path / "run=r" / "tracking" / "wandb").glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records(log)
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item} for r in records if r.HasField("history")]
    assert [(h["train/global_step"], h["train/loss"]) for h in history if "train/loss" in h] == [
        (1, 0.5), (2, 0.25), (3, 0.125)]  # fmt: skip
    assert [(h["train/global_step"], h["eval/test/success"]) for h in history if "eval/test/success" in h] == [
        (2, 0.5), (2, 0.625), (3, 0.75)]  # fmt: skip
    axes = {r.metric.name: r.metric.step_metric for r in records if r.HasField("metric")}
    assert axes["train/loss"] == "train/global_step" and axes["eval/test/success"] == "train/global_step"
    (run,) = [r.run for r in records if r.HasField("run")]
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["train.lr"] == pytest.approx(parse_config({}, source="t").train.lr)
    assert run.run_group == "r" and run.display_name == "r"
