"""Experiment tracking in the real loop: test-tiny.yaml through the Prefect flow with
`tracking.report_to: [tensorboard]`; the event files under the run's folder hold exactly the values of
`flows.summary.round_metrics`, one point per round: a finished run gets its rounds when tracking is turned
on (also through the CLI's all-cached path, which starts no flow), a continued run its new ones, a cached
re-run none."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS
from tests.unit.test_tracking import logged_scalars

pytestmark = pytest.mark.slow

TRACKING = "tracking.report_to=[tensorboard]"
SMALL = ["rollout.tasks_per_round=1", "rollout.k=2", "rollout.max_new_tokens=8", "eval.max_tasks=2"]


def test_round_metrics_reach_tensorboard_once_per_round(tmp_path, monkeypatch, prefect_api):
    from typer.testing import CliRunner

    from coevolve.flows.cli import app
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.summary import run_metrics
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    config = str(CONFIGS / "test-tiny.yaml")

    def cached_cli_run(rounds: int) -> None:  # every stage cached: the CLI prints the rounds without Prefect
        args = ["run", config, "--run", "tracked", "--rounds", str(rounds), "--root", str(tmp_path)]
        result = CliRunner().invoke(app, [*args, *(f"--set={o}" for o in [*SMALL, TRACKING])])
        assert result.exit_code == 0 and "cached" in result.output, result.output

    coevolve(config, run="tracked", rounds=1, overrides=SMALL)  # tracking off
    folder = tmp_path / "run=tracked" / "tracking" / "tensorboard"
    assert not folder.exists()
    cached_cli_run(1)  # tracking on for a finished run: its round is logged
    coevolve(config, run="tracked", rounds=2, overrides=[*SMALL, TRACKING])  # continued: round 1 is logged
    coevolve(config, run="tracked", rounds=2, overrides=[*SMALL, TRACKING])  # the same again, all cached
    cached_cli_run(2)

    expected = run_metrics(RunStore(RunLayout(tmp_path, "tracked")), 2)
    logged = logged_scalars(folder)
    names = {k for row in expected for k, v in row.items() if k != "round" and v is not None}
    assert {"train_success", "train_reward", "loss", "kl", "dataset_size", "eval_test_success"} <= names
    assert set(logged) == names
    for name, points in logged.items():
        want = [(row["round"], row[name]) for row in expected if row[name] is not None]
        assert [step for step, _ in points] == [r for r, _ in want], name  # once per round
        assert [v for _, v in points] == pytest.approx([v for _, v in want], rel=1e-6, abs=1e-9), name
