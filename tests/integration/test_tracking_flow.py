"""Experiment tracking in the real loop: test-tiny.yaml through the Prefect flow with
`tracking.report_to: [tensorboard]`; the event files under the run's folder hold exactly the values of
`flows.summary.round_metrics` under their tags, one point per round at the round's last optimizer step
(TRL's global step): a finished run gets its rounds when
tracking is turned on (also through the CLI's all-cached path, which starts no flow), a continued run its
new ones, a cached re-run none. An evolving run's real updates reach it per optimizer step, on a global step
axis across rounds."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import CONFIGS
from tests.unit.test_tracking import STEP_TAGS, logged_scalars

pytestmark = pytest.mark.slow

TRACKING = "tracking.report_to=[tensorboard]"
SMALL = ["rollout.tasks_per_round=1", "rollout.k=2", "rollout.max_new_tokens=8", "eval.max_tasks=2"]


def test_round_metrics_reach_tensorboard_once_per_round(tmp_path, monkeypatch, prefect_api):
    from typer.testing import CliRunner

    from coevolve.cli import app
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.summary import run_metrics
    from coevolve.flows.tracking import ROUND_TAG, round_tags, update_steps
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    config = str(CONFIGS / "test-tiny.yaml")

    def cached_cli_run(rounds: int) -> str:  # every stage cached: the CLI prints the rounds without Prefect
        args = ["run", config, "--run", "tracked", "--rounds", str(rounds), "--root", str(tmp_path)]
        result = CliRunner().invoke(app, [*args, *(f"--set={o}" for o in [*SMALL, TRACKING])])
        assert result.exit_code == 0 and "cached" in result.output, result.output
        return result.output

    coevolve(config, run="tracked", rounds=1, overrides=SMALL)  # tracking off
    folder = tmp_path / "run=tracked" / "tracking" / "tensorboard"
    assert not folder.exists()
    cached_cli_run(1)  # tracking on for a finished run: its round is logged
    coevolve(config, run="tracked", rounds=2, overrides=[*SMALL, TRACKING])  # continued: round 1 is logged
    coevolve(config, run="tracked", rounds=2, overrides=[*SMALL, TRACKING])  # the same again, all cached
    lines = [line for line in cached_cli_run(2).splitlines() if line.startswith("round ")]

    store = RunStore(RunLayout(tmp_path, "tracked"))
    expected = run_metrics(store, 2)
    logged = logged_scalars(folder)
    tags = {tag for row in expected for key, tag in round_tags(row).items() if row[key] is not None}
    assert {"train/success", "train/reward", "evolution/dataset_size", "eval/test/success"} <= tags
    assert set(logged) - STEP_TAGS == tags | {ROUND_TAG}
    last_step = [len(update_steps(store, 0)), len(update_steps(store, 0)) + len(update_steps(store, 1))]
    for row, line in zip(expected, lines, strict=True):  # test-tiny's 2 rollouts of 1 task: rarely a signal
        assert ("warning: no group with signal" in line) == (row["groups_with_signal"] == 0), line
    for tag in tags:  # once per round, at the round's last optimizer step, in round order
        want = [(last_step[row["round"]], row[key]) for row in expected for key, t in round_tags(row).items()
                if t == tag and row[key] is not None]  # fmt: skip
        assert [step for step, _ in logged[tag]] == [step for step, _ in want], tag
        assert [v for _, v in logged[tag]] == pytest.approx([v for _, v in want]), tag


def test_an_evolving_runs_updates_reach_tensorboard_per_optimizer_step(evolved_run, tmp_path):
    from coevolve.config import load_config
    from coevolve.flows.summary import run_metrics
    from coevolve.flows.tracking import track_rounds, update_steps
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    shutil.copytree(evolved_run.root / "run=evo", tmp_path / "run=evo", ignore=shutil.ignore_patterns("checkpoints"))
    store = RunStore(RunLayout(tmp_path, "evo"))
    config = load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", TRACKING])
    assert track_rounds(config, store.layout, run_metrics(store, 2)) == {"tensorboard": [0, 1]}

    steps = [s for r in range(2) for s in update_steps(store, r)]
    assert [len(update_steps(store, r)) for r in range(2)] == [config.train.mini_batches * config.train.epochs] * 2
    for r in range(2):  # the manifest's update loss is the mean of its steps'
        assert store.manifest(r, "grpo_update").outputs["loss"] == pytest.approx(
            sum(s["loss"] for s in update_steps(store, r)) / len(update_steps(store, r)))
    logged = logged_scalars(store.layout.run_dir / "tracking" / "tensorboard")
    assert set(logged) >= STEP_TAGS
    assert [step for step, _ in logged["train/loss"]] == list(range(1, len(steps) + 1))
    assert [v for _, v in logged["train/loss"]] == pytest.approx([s["loss"] for s in steps], rel=1e-5)
    assert [v for _, v in logged["train/learning_rate"]] == pytest.approx([config.train.lr] * len(steps))
    assert all(v > 0 for _, v in logged["train/entropy"] + logged["train/completion_length"] + logged["train/grad_norm"])
    assert all(v > 0 for _, v in logged["train/frac_groups_with_signal"])  # the oracle solves every other episode
    assert {"evolution/boundary_signals", "evolution/added_tasks"} <= set(logged)
