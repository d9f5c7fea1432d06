"""TRL's metric names: a round's rollout figures (`frac_reward_zero_std`, `completions/*`, `tools/*`) by hand, the
importance-sampling figures of an update summed over processes, and both reaching TensorBoard under
`train/<TRL's name>`."""

from __future__ import annotations

import pytest
import torch

from coevolve.config import parse_config
from coevolve.flows.summary import run_metrics
from coevolve.flows.tracking import track_rounds
from coevolve.rl.is_correction import WeightStats
from coevolve.rl.loss import LossMetrics
from coevolve.rl.rollout_metrics import rollout_figures
from coevolve.rl.update_metrics import MetricsSum
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.store import RunStore


def trajectory(group: str, reward: float, tokens: int, finish: str = "done") -> dict:
    return {"group_id": group, "reward": reward, "completion_tokens": tokens, "finish": finish}


TRAJECTORIES = [trajectory("a", 1.0, 10), trajectory("a", 0.0, 20, "max_steps"),  # a: rewards differ
                trajectory("b", 0.0, 30, "context"), trajectory("b", 0.0, 40)]  # b: all equal  # fmt: skip
STEPS = [{"kind": "call", "ok": True}, {"kind": "call", "ok": False}, {"kind": "call", "ok": True},
         {"kind": "parse_error", "ok": False}, {"kind": "answer", "ok": True}]  # fmt: skip


def test_rollout_figures_by_hand():
    assert rollout_figures(TRAJECTORIES, STEPS) == {
        "frac_reward_zero_std": 0.5,  # group b of a and b
        "completions_mean_length": 25.0,  # (10 + 20 + 30 + 40) / 4
        "completions_clipped_ratio": 0.5,  # max_steps and context: a limit ended them
        "tools_call_frequency": 0.75,  # 3 calls over 4 episodes; the unparsable one is no call
        "tools_failure_frequency": pytest.approx(1 / 3),
    }
    assert rollout_figures([], []) == dict.fromkeys(rollout_figures(TRAJECTORIES, STEPS), 0.0)


class TwoProcesses:
    """An accelerator stand-in: `reduce` adds and `gather` stacks the other process's tensors (recorded first)."""

    device = torch.device("cpu")

    def __init__(self, other=None):
        self.other, self.seen = other or {}, {}

    def reduce(self, tensor, reduction):
        self.seen["reduce"] = tensor
        return tensor + self.other["reduce"] if self.other else tensor

    def gather(self, tensor):
        self.seen["gather"] = tensor
        return torch.cat([tensor, self.other["gather"]]) if self.other else tensor


def test_importance_sampling_figures_over_processes_are_one_process_with_every_micro_batch():
    loss = LossMetrics(0.5, 0.4, 0.0, 0.0, 0.0, 0.0, 1.0, 4)
    a = WeightStats(ratio_sum=2.0, ratio_count=2, ratio_min=0.5, ratio_max=1.5, diff_sum=0.4, diff_max=0.3, tokens=4)
    b = WeightStats(ratio_sum=3.0, ratio_count=2, ratio_min=0.0, ratio_max=3.0, diff_sum=0.8, diff_max=0.2, tokens=4)
    one, first, second = MetricsSum(), MetricsSum(), MetricsSum()
    for acc, parts in ((one, (a, b)), (first, (a,)), (second, (b,))):
        for w in parts:
            acc.add(loss, 1.0, 1)
            acc.add_weights(w)
        acc.end_step(0.5, 1e-5)
    recorder = TwoProcesses()
    second.summed_over(recorder)
    both = first.summed_over(TwoProcesses(recorder.seen)).step_records()[0]
    expected = {"is_ratio_min": 0.0, "is_ratio_mean": 1.25, "is_ratio_max": 3.0, "logp_diff_mean": 0.15,
                "logp_diff_max": 0.3}  # fmt: skip
    assert {k: both[k] for k in expected} == pytest.approx(expected)
    assert {k: one.step_records()[0][k] for k in expected} == pytest.approx(expected)


def test_trl_names_reach_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tests.unit.test_tracking import logged_scalars, step

    layout = RunLayout(tmp_path, "r")
    records = {**step(0.5), "is_ratio_min": 0.0, "is_ratio_mean": 0.98, "is_ratio_max": 1.2, "logp_diff_mean": 0.03,
               "logp_diff_max": 0.3}  # fmt: skip
    outputs = {"rollout": {"success_rate": 0.5, "mean_reward": 0.5, **rollout_figures(TRAJECTORIES, STEPS)},
               "grpo_update": {"loss": 0.5, "kl": 0.0, "groups": 2, "groups_with_signal": 1, "steps": [records]}}
    for stage, out in outputs.items():
        Manifest(stage, "r", 0, "k", 1, outputs=out).write(layout.manifest_path(0, stage))
    config = parse_config({}, source="t", overrides=["tracking.report_to=[tensorboard]"])
    track_rounds(config, layout, run_metrics(RunStore(layout), 1))
    logged = logged_scalars(tmp_path / "run=r" / "tracking" / "tensorboard")
    assert logged["train/frac_reward_zero_std"] == [(1, 0.5)]
    assert logged["train/completions/mean_length"] == [(1, 25.0)]
    assert logged["train/completions/clipped_ratio"] == [(1, 0.5)]
    assert logged["train/tools/call_frequency"] == [(1, 0.75)]
    assert logged["train/tools/failure_frequency"] == [(1, pytest.approx(1 / 3))]
    assert logged["train/sampling/importance_sampling_ratio/min"] == [(1, 0.0)]
    assert logged["train/sampling/importance_sampling_ratio/mean"] == [(1, pytest.approx(0.98))]
    assert logged["train/sampling/importance_sampling_ratio/max"] == [(1, pytest.approx(1.2))]
    assert logged["train/sampling/sampling_logp_difference/mean"] == [(1, pytest.approx(0.03))]
