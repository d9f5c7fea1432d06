"""Divergence advice names the setting that diverged, derived from what the update saw: an absurd LoRA scale
is blamed on `train.lora_alpha` (and refused at config time), a loss that is non-finite before any step
on neither the learning rate nor anything else of the config, a learning rate that moved the weights too
far on `train.lr`; the paragraph's `--set` changes the setting it names."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from peft import LoraConfig, get_peft_model

from coevolve.config import ConfigError, load_config
from coevolve.rl.divergence import DivergenceError
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer
from coevolve.stages.grpo_update.stage import diverged
from tests.conftest import CONFIGS
from tests.unit.test_rl_update import SIGNAL, make_batch, tiny_llama


def lora_llama(alpha: float, rank: int = 8):
    torch.manual_seed(0)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear")
    return get_peft_model(tiny_llama(), config)


def divergence(model, lr: float = 2e-5, rewards: list[float] = SIGNAL) -> DivergenceError:
    hp = UpdateHyperparams(lr=lr, mini_batches=2)
    with pytest.raises(DivergenceError) as stopped:
        grpo_update(model, None, make_optimizer(model, lr=lr), make_batch(rewards), hp)
    return stopped.value


def paragraph(exc: DivergenceError, overrides: list[str]) -> str:
    ctx = types.SimpleNamespace(config=load_config(CONFIGS / "test-tiny.yaml", overrides), run="evo")
    return str(diverged(ctx, 3, exc))


def test_the_issues_lora_alpha_is_refused_at_config_time_naming_it():
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIGS / "test-tiny.yaml", ["train.lora_rank=8", "train.lora_alpha=1e308"])
    message = str(refused.value)
    assert "train.lora_alpha: " in message and "\n" not in message and "train.lr" not in message


@pytest.mark.parametrize("alpha", [1e308, 1e12])
def test_an_absurd_lora_scale_is_blamed_on_lora_alpha_not_the_learning_rate(alpha):
    """A scale past the config's bound (an adapter built by hand, or a config of before the bound): 1e308
    overflows the first forward, 1e12 the second step's gradient, after the weights moved."""
    stopped = divergence(lora_llama(alpha))
    assert stopped.cause.setting == "train.lora_alpha"
    assert "LoRA scale lora_alpha / lora_rank" in str(stopped) and "learning rate 2e-05 is too high" not in str(stopped)
    said = paragraph(stopped, ["train.lora_rank=8", "train.lora_alpha=512"])
    assert "--set train.lora_alpha=16`" in said and "train.lr=" not in said and "\n" not in said


def test_a_learning_rate_that_moves_the_weights_too_far_is_still_blamed_on_the_learning_rate():
    stopped = divergence(lora_llama(16.0), lr=1e30)
    assert (stopped.step, stopped.cause.setting) == (2, "train.lr")
    assert "learning rate 1e+30 is too high" in str(stopped)
    assert "--set train.lr=0.0001`" in paragraph(stopped, ["train.lr=1e-3"])


def test_a_loss_non_finite_before_any_step_from_finite_weights_is_not_blamed_on_the_learning_rate(monkeypatch):
    import coevolve.rl.update as update

    real = update.grpo_loss

    def nan_loss(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        return loss * float("nan"), dataclasses.replace(metrics, loss=float("nan"))

    monkeypatch.setattr(update, "grpo_loss", nan_loss)
    stopped = divergence(tiny_llama(), lr=1e-3)
    assert (stopped.step, stopped.what, stopped.cause.setting) == (1, "loss", None)
    assert "not its learning rate" in str(stopped)
    said = paragraph(stopped, ["train.lr=1e-3"])
    assert "No setting of the config is to blame" in said and "--set" not in said


def test_non_finite_rewards_are_named_as_the_cause():
    stopped = divergence(tiny_llama(), rewards=[float("nan"), *SIGNAL[1:]])
    assert stopped.cause.setting is None and "rewards hold NaN or inf" in str(stopped)
