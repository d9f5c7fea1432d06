"""Experiment tracking in the real loop: test-tiny.yaml through the Prefect flow with
`tracking.report_to: [tensorboard]`; the event files under the run's folder hold exactly the values of
`flows.summary.round_metrics`, one point per round, after a continued run and a cached re-run."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS
from tests.unit.test_tracking import logged_scalars

pytestmark = pytest.mark.slow

OVERRIDES = ["tracking.report_to=[tensorboard]", "rollout.tasks_per_round=1", "rollout.k=2",
             "rollout.max_new_tokens=8", "eval.max_tasks=2"]  # fmt: skip


def test_round_metrics_reach_tensorboard_once_per_round(tmp_path, monkeypatch, prefect_api):
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.summary import run_metrics
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    for rounds in (1, 2, 2):  # a run, its continuation, the same command again (all cached)
        coevolve(str(CONFIGS / "test-tiny.yaml"), run="tracked", rounds=rounds, overrides=OVERRIDES)

    expected = run_metrics(RunStore(RunLayout(tmp_path, "tracked")), 2)
    logged = logged_scalars(tmp_path / "run=tracked" / "tracking" / "tensorboard")
    names = {k for row in expected for k, v in row.items() if k != "round" and v is not None}
    assert {"train_success", "train_reward", "loss", "kl", "dataset_size", "eval_test_success"} <= names
    assert set(logged) == names
    for name, points in logged.items():
        want = [(row["round"], row[name]) for row in expected if row[name] is not None]
        assert [step for step, _ in points] == [r for r, _ in want], name  # once per round
        assert [v for _, v in points] == pytest.approx([v for _, v in want], rel=1e-6, abs=1e-9), name
