"""Divergence guard: config values that cannot train are refused by name, and an update whose loss, gradient
norm or weights turn non-finite stops before anything is saved, so the run continues once the config changes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from coevolve.config import ConfigError, load_config
from coevolve.pipeline.runner import run_stage
from coevolve.rl.divergence import DivergenceError
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.grpo_update.stage import GRPO_UPDATE, UpdateDivergedError
from coevolve.stages.rollout.stage import ROLLOUT
from tests.conftest import CONFIGS, fake_context
from tests.unit.test_rl_update import SIGNAL, make_batch, params, tiny_llama

# ---------------------------------------------------------------- config bounds


@pytest.mark.parametrize("override", [
    "train.lr=.inf", "train.lr=.nan", "train.lr=10", "rollout.temperature=.inf", "train.beta=.inf",
    "train.max_grad_norm=.nan", "merge.signal_weight=.inf", "rollout.k=100000", "run.rounds=1000000000",
    "rollout.tasks_per_round=1000000000", "rollout.max_new_tokens=1000000000",
])  # fmt: skip
def test_a_value_that_cannot_train_is_refused_in_one_line_naming_its_field(override):
    field = override.partition("=")[0]
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIGS / "test-tiny.yaml", [override])
    message = str(refused.value)
    assert f"{field}:" in message and "\n" not in message
    assert message.count(":") == 2  # `file: field: problem`, this field only


# ---------------------------------------------------------------- the update


def test_an_infinite_learning_rate_stops_at_the_weights_of_the_first_step():
    model = tiny_llama()
    with pytest.raises(DivergenceError) as stopped:
        grpo_update(model, None, make_optimizer(model, lr=float("inf")), make_batch(SIGNAL), UpdateHyperparams(lr=0))
    assert (stopped.value.step, stopped.value.steps, stopped.value.what) == (1, 1, "weights")
    assert "optimizer step 1 of 1" in str(stopped.value) and "learning rate inf is too high" in str(stopped.value)
    assert model.training is False and all(p.grad is None for p in model.parameters())


def test_float16_weights_that_diverge_are_named_as_the_cause_not_the_learning_rate():
    model = tiny_llama().to(torch.float16)
    with pytest.raises(DivergenceError) as stopped:
        grpo_update(model, None, make_optimizer(model, lr=1e-3), make_batch(SIGNAL), UpdateHyperparams(lr=1e-3))
    assert stopped.value.cause.setting == "model.dtype"
    assert "float16" in str(stopped.value) and "model.dtype" in str(stopped.value)
    assert "too high" not in str(stopped.value)


def test_a_nan_loss_stops_before_the_optimizer_step():
    model = tiny_llama()
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")  # every log-prob is NaN
    before = params(model)
    optimizer = make_optimizer(model, lr=1e-3)
    hp = UpdateHyperparams(lr=1e-3, mini_batches=2)
    with pytest.raises(DivergenceError) as stopped:
        grpo_update(model, None, optimizer, make_batch(SIGNAL), hp)
    assert (stopped.value.step, stopped.value.steps, stopped.value.what) == (1, 2, "loss")
    assert "its loss is NaN or inf" in str(stopped.value) and "starts from" in str(stopped.value)
    assert not optimizer.state  # no step was taken
    after = params(model)
    assert all(torch.equal(before[k], after[k]) for k in before if k != "lm_head.weight")


# ---------------------------------------------------------------- the stage


def nan_losses(monkeypatch):
    """Every GRPO loss of the update becomes NaN (its value and its metrics)."""
    import coevolve.rl.update as update

    real = update.grpo_loss

    def nan_loss(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        return loss * float("nan"), dataclasses.replace(metrics, loss=float("nan"))

    monkeypatch.setattr(update, "grpo_loss", nan_loss)


def test_a_diverged_update_saves_nothing_and_the_run_continues_after_a_config_change(
    tmp_path, tokenizer, monkeypatch
):
    cfg = load_config(CONFIGS / "test-tiny.yaml")
    ctx = fake_context(cfg, tmp_path, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT):
        run_stage(stage, ctx, 0)
    nan_losses(monkeypatch)
    with pytest.raises(UpdateDivergedError) as stopped:
        run_stage(GRPO_UPDATE, ctx, 0)
    message = str(stopped.value)
    assert "round 0 of run 'evo'" in message and "optimizer step 1 of 1" in message and "loss" in message
    # NaN before any step, from finite weights: not the learning rate, nor any other setting
    assert "not its learning rate" in message and "--set" not in message and "\n" not in message
    assert ctx.store.manifest(0, "grpo_update") is None
    assert not ctx.store.layout.checkpoint_dir(0).exists()
    assert ctx.policy.version == ""  # the weights in memory are no version's: the next use reloads them

    monkeypatch.undo()
    changed = fake_context(load_config(CONFIGS / "test-tiny.yaml", ["train.lr=1e-4"]), tmp_path, tokenizer)
    assert run_stage(ROLLOUT, changed, 0).cached
    record = run_stage(GRPO_UPDATE, changed, 0)
    assert not record.cached and changed.store.layout.checkpoint_dir(0).is_dir()


def test_a_run_continued_with_another_learning_rate_steps_at_it_with_the_saved_moments(tmp_path):
    """After a divergence the paragraph says `--set train.lr=...`: the optimizer state loaded from the
    checkpoint brings its moments, not the old rate."""
    from coevolve.rl.checkpoint import load_optimizer_state, save_checkpoint
    from tests.unit.test_rl_update import tiny_tokenizer

    model = tiny_llama()
    old = make_optimizer(model, lr=1e-3, weight_decay=0.1)
    grpo_update(model, None, old, make_batch(SIGNAL), UpdateHyperparams(lr=1e-3))
    save_checkpoint(model, tiny_tokenizer(), old, tmp_path / "round=0")
    new = make_optimizer(model, lr=1e-5, weight_decay=0.0)
    assert load_optimizer_state(new, tmp_path / "round=0")
    assert [(g["lr"], g["weight_decay"]) for g in new.param_groups] == [(1e-5, 0.0)]
    moments = [s["exp_avg"] for s in new.state.values()]
    assert moments and all(torch.equal(a, s["exp_avg"]) for a, s in zip(moments, old.state.values(), strict=True))
