"""Per-optimizer-step metrics of a GRPO update (`rl.update_metrics`): one record per step, the learning rate
each step used, an entropy estimate and completion length computed by hand, and the update's averages
the mean of its steps."""

from __future__ import annotations

import copy

import pytest
import torch

from coevolve.rl.logprobs import token_logprobs
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer
from tests.unit.test_rl_update import SIGNAL, make_batch, tiny_llama


class HalvingAdamW(torch.optim.AdamW):
    """AdamW whose learning rate halves after every step (a schedule stepped inside the update)."""

    def step(self, closure=None):
        out = super().step(closure)
        for group in self.param_groups:
            group["lr"] /= 2
        return out


def test_one_record_per_optimizer_step_with_the_rate_it_used():
    model = tiny_llama()
    hp = UpdateHyperparams(lr=1e-2, mini_batches=2, epochs=2)
    optimizer = HalvingAdamW([p for p in model.parameters() if p.requires_grad], lr=hp.lr)
    result = grpo_update(model, None, optimizer, make_batch(SIGNAL), hp)
    assert result.optimizer_steps == len(result.steps) == 4
    assert [s["learning_rate"] for s in result.steps] == pytest.approx([1e-2, 5e-3, 2.5e-3, 1.25e-3])
    assert result.loss == pytest.approx(sum(s["loss"] for s in result.steps) / 4)
    assert result.grad_norm == pytest.approx(sum(s["grad_norm"] for s in result.steps) / 4)
    assert all(s["grad_norm"] > 0 and 0 <= s["clip_ratio"] <= 1 for s in result.steps)
    assert result.steps[-1]["clip_ratio"] >= result.steps[-1]["clip_ratio_low"]
    assert result.steps[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # on-policy first step


def test_entropy_estimate_and_completion_length_by_hand():
    model = tiny_llama()
    batch = make_batch(SIGNAL)
    padded = batch.pad(list(range(len(SIGNAL))))
    mask = padded.loss_mask.bool()
    with torch.no_grad():
        lp = token_logprobs(copy.deepcopy(model), padded.input_ids, padded.attention_mask, score_mask=padded.loss_mask)
    hp = UpdateHyperparams(lr=1e-2)
    result = grpo_update(model, None, make_optimizer(model, hp.lr), batch, hp)
    (step,) = result.steps
    assert step["entropy"] == pytest.approx(float(-lp[mask].mean()), rel=1e-4)
    assert step["completion_length"] == pytest.approx(batch.policy_tokens(range(8)) / 8)
    assert step["learning_rate"] == result.lr == pytest.approx(1e-2)
    assert step["kl"] == 0.0  # beta 0: no reference, no KL


def test_an_update_without_signal_has_no_steps():
    model = tiny_llama()
    result = grpo_update(model, None, make_optimizer(model, 1e-2), make_batch([1.0] * 8), UpdateHyperparams(lr=1e-2))
    assert result.optimizer_steps == 0 and result.steps == ()


class TwoProcesses:
    """An accelerator stand-in whose `reduce` adds the other process's tensor (recorded beforehand)."""

    device = torch.device("cpu")

    def __init__(self, other: torch.Tensor | None = None):
        self.other, self.seen = other, None

    def reduce(self, tensor, reduction):
        self.seen = tensor
        return tensor if self.other is None else tensor + self.other


def test_steps_summed_over_processes_equal_one_process_with_every_micro_batch():
    from coevolve.rl.loss import LossMetrics
    from coevolve.rl.update_metrics import MetricsSum

    micro = [LossMetrics(0.5, 0.4, 0.01 * i, 0.1, 0.05, 0.05, 1.0, 10 + i) for i in range(4)]
    one, first, second = MetricsSum(), MetricsSum(), MetricsSum()
    for step in (0, 1):  # two steps of two micro-batches; process 0 runs the first of each, process 1 the second
        for i in (0, 1):
            m = micro[2 * step + i]
            one.add(m, 2.0 * m.tokens, 3)
            (first if i == 0 else second).add(m, 2.0 * m.tokens, 3)
        for acc in (one, first, second):
            acc.end_step(0.7, 1e-5)
    recorder = TwoProcesses()
    second.summed_over(recorder)
    both = first.summed_over(TwoProcesses(recorder.seen))
    assert len(both.step_records()) == 2
    for mine, whole in zip(both.step_records(), one.step_records(), strict=True):
        assert mine == pytest.approx(whole)
    assert both.summary() == pytest.approx(one.summary())
    assert [r["completion_length"] for r in both.step_records()] == pytest.approx([21 / 6, 25 / 6])  # tokens / rows
    assert both.step_records()[0]["entropy"] == pytest.approx(2.0)  # -log p summed 2 per token
