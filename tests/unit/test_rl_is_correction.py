"""Importance-sampling correction of the engine's log-probs (TRL's `vllm_importance_sampling_*`): the weights by
hand in every mode, the loss they weigh, exactly off where the trainer generates, and a bfloat16-like server
against a float32 trainer on a tiny Llama."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from coevolve.config import CoevolveConfig
from coevolve.config.train import TrainConfig
from coevolve.rl.batch import SampleBatch
from coevolve.rl.hyperparams import update_hyperparams
from coevolve.rl.is_correction import ISCorrection, importance_weights, weight_stats
from coevolve.rl.logprobs import token_logprobs
from coevolve.rl.loss import grpo_loss
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer
from tests.unit.test_rl_update import SIGNAL, make_batch, params, tiny_llama

# three rows of 4 positions, policy tokens at 1 and 2; position 0 holds garbage the mask must hide
OLD = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -0.5, -0.5, 0.0], [0.0, -1.0, -1.0, 0.0]])  # [3, 4]
ENGINE = torch.tensor([[-math.inf, -1.5, -1.0, 0.0], [-math.inf, -0.5, -0.3, 0.0],
                       [-math.inf, -1.3, -1.3, 0.0]])  # [3, 4]; log ratios: (.5, -1), (0, -.2), (.3, .3)
MASK = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]], dtype=torch.float32)  # [3, 4]
E = math.exp


@pytest.mark.parametrize(("mode", "expected"), [
    ("token_truncate", [[1, 1.5, E(-1), 1], [1, 1, E(-0.2), 1], [1, E(0.3), E(0.3), 1]]),
    ("token_mask", [[1, 0, E(-1), 1], [1, 1, E(-0.2), 1], [1, E(0.3), E(0.3), 1]]),
    ("sequence_truncate", [[E(-0.5)], [E(-0.2)], [1.5]]),  # row 3: each token under the cap, their product over
    ("sequence_mask", [[E(-0.5)], [E(-0.2)], [0.0]]),
])  # fmt: skip
def test_weights_by_hand_in_every_mode(mode, expected):
    weights = importance_weights(OLD, ENGINE, MASK, ISCorrection(mode, cap=1.5))  # [3, 4] or [3, 1]
    torch.testing.assert_close(weights, torch.tensor(expected))  # off policy tokens: 1, never read
    assert torch.isfinite(weights).all()  # the -inf at position 0 never reaches exp()


def test_logged_figures_by_hand():
    tokens = weight_stats(importance_weights(OLD, ENGINE, MASK, ISCorrection("token_truncate", 1.5)), OLD, ENGINE, MASK)
    assert (tokens.ratio_count, tokens.ratio_min, tokens.ratio_max) == (6, pytest.approx(E(-1)), 1.5)
    assert tokens.ratio_sum == pytest.approx(1.5 + E(-1) + 1 + E(-0.2) + 2 * E(0.3))
    assert (tokens.diff_sum, tokens.diff_max, tokens.tokens) == (pytest.approx(0.5 + 1 + 0.2 + 0.6), 1.0, 6)
    rows = weight_stats(importance_weights(OLD, ENGINE, MASK, ISCorrection("sequence_mask", 1.5)), OLD, ENGINE, MASK)
    assert (rows.ratio_count, rows.ratio_min, rows.ratio_max) == (3, 0.0, pytest.approx(E(-0.2)))


def test_the_weights_multiply_the_surrogate_not_the_kl_term():
    lp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)  # [1, 3]
    ref = torch.tensor([[0.0, -1.2, -1.5]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    adv = torch.tensor([2.0])
    plain, _ = grpo_loss(lp, lp.detach(), ref, adv, mask, clip_low=0.2, clip_high=0.2, beta=0.5)
    weighed, _ = grpo_loss(lp, lp.detach(), ref, adv, mask, clip_low=0.2, clip_high=0.2, beta=0.5,
                           is_weights=torch.tensor([[1.0, 0.25, 0.0]]))  # fmt: skip
    kl = sum(math.exp(d) - d - 1 for d in (-0.2, 0.5))  # k3 at the two policy tokens
    assert float(plain.detach()) == pytest.approx((-2 - 2 + 0.5 * kl) / 2)  # ratio 1: surrogate -A per token
    assert float(weighed.detach()) == pytest.approx((-2 * 0.25 + 0.5 * kl) / 2)  # same divisor: a masked token still counts


def test_config_is_trls_and_unset_means_on_only_where_a_server_generates():
    train = TrainConfig()
    assert (train.vllm_importance_sampling_correction, train.vllm_importance_sampling_mode,
            train.vllm_importance_sampling_cap) == (None, "sequence_mask", 3.0)  # fmt: skip
    assert update_hyperparams(CoevolveConfig(), 0).is_correction is None  # the trainer generates
    served = CoevolveConfig.model_validate({"model": {"servers": ["http://127.0.0.1:8000/v1"]}})
    assert update_hyperparams(served, 0).is_correction == ISCorrection("sequence_mask", 3.0)
    off = CoevolveConfig.model_validate({"model": {"servers": ["http://127.0.0.1:8000/v1"]},
                                         "train": {"vllm_importance_sampling_correction": False}})  # fmt: skip
    assert update_hyperparams(off, 0).is_correction is None
    on = CoevolveConfig.model_validate({"train": {"vllm_importance_sampling_correction": True,
                                                  "vllm_importance_sampling_mode": "token_truncate",
                                                  "vllm_importance_sampling_cap": 2.0}})  # fmt: skip
    assert update_hyperparams(on, 0).is_correction == ISCorrection("token_truncate", 2.0)
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        TrainConfig(vllm_importance_sampling_mode="sequence_clip")


def trainer_logprobs(model, batch: SampleBatch) -> list[list[float]]:
    """Each row's float32 log-probs under `model`, one row at a time (what an exact engine would report)."""
    out = []
    with torch.no_grad():
        for ids in batch.input_ids:
            t = torch.tensor([ids])
            out.append(token_logprobs(model, t, torch.ones_like(t))[0].tolist())
    return out


def with_engine(batch: SampleBatch, engine: list[list[float]]) -> SampleBatch:
    masked = [[lp if m else 0.0 for lp, m in zip(row, mask, strict=True)]
              for row, mask in zip(engine, batch.loss_mask, strict=True)]  # fmt: skip
    return SampleBatch(batch.input_ids, batch.loss_mask, batch.rewards, batch.group_ids, engine_logprobs=masked)


def updated(batch: SampleBatch, hp: UpdateHyperparams, model=None, *, sgd: bool = False):
    """The weights after one update of a copy of `model` (AdamW, or plain SGD: the change is -lr x gradient)."""
    model = copy.deepcopy(model or tiny_llama())
    optimizer = torch.optim.SGD(model.parameters(), lr=hp.lr) if sgd else make_optimizer(model, hp.lr)
    result = grpo_update(model, None, optimizer, batch, hp)
    return params(model), result


def test_off_where_the_trainer_generates_the_update_is_bit_identical():
    """The field unset without servers: the same weights, bit for bit, as an update that never saw the engine's
    log-probs (today's path), even with log-probs far from the trainer's."""
    batch = make_batch(SIGNAL)
    hp = update_hyperparams(CoevolveConfig.model_validate({"train": {"lr": 1e-2, "micro_batch_size": 2}}), 0)
    assert hp.is_correction is None
    engine = [[-5.0] * len(ids) for ids in batch.input_ids]
    plain, plain_result = updated(batch, hp)
    given, given_result = updated(with_engine(batch, engine), hp)
    assert all(torch.equal(plain[k], given[k]) for k in plain)
    assert plain_result.steps == given_result.steps and "is_ratio_mean" not in given_result.steps[0]


def test_a_bfloat16_server_against_a_float32_trainer():
    """Engine log-probs as a bfloat16 server reports them: the trainer's rounded through bfloat16 plus noise of the
    measured size (mean |log ratio| 0.029, `vllm-numerics`). The corrected update stays within 10 % (relative, in
    the weights' change) of the float32-only update; a sequence whose engine log-probs put it beyond the cap
    leaves the gradient."""
    model = tiny_llama()
    batch = make_batch(SIGNAL)
    exact = trainer_logprobs(model, batch)
    g = torch.Generator().manual_seed(0)
    sigma = 0.029 * math.sqrt(math.pi / 2)  # E|N(0, s)| = s sqrt(2 / pi)
    served = [(torch.tensor(row).to(torch.bfloat16).float() + sigma * torch.randn(len(row), generator=g)).tolist()
              for row in exact]  # fmt: skip
    hp = UpdateHyperparams(lr=1e-2, micro_batch_size=2)
    start = params(model)
    reference, _ = updated(with_engine(batch, exact), hp, model, sgd=True)  # float32 only: nothing to correct
    corrected, result = updated(with_engine(batch, served), replace(hp, is_correction=ISCorrection()), model, sgd=True)
    step = result.steps[0]
    gaps = [abs(a - b) for row, e, m in zip(exact, served, batch.loss_mask, strict=True)
            for a, b, keep in zip(row, e, m, strict=True) if keep]  # fmt: skip
    assert 0.02 < sum(gaps) / len(gaps) < 0.04  # the measured mismatch
    assert step["logp_diff_mean"] == pytest.approx(sum(gaps) / len(gaps), rel=1e-3)
    assert 0.5 < step["is_ratio_min"] <= step["is_ratio_mean"] <= step["is_ratio_max"] < 3.0  # nothing masked
    delta_ref = torch.cat([(reference[k] - start[k]).flatten() for k in start])
    delta_cor = torch.cat([(corrected[k] - start[k]).flatten() for k in start])
    assert float((delta_cor - delta_ref).norm() / delta_ref.norm()) < 0.10
    assert not torch.equal(delta_cor, delta_ref)  # the correction acted

    far = [list(row) for row in served]
    far[0] = [lp - 0.5 if keep else lp for lp, keep in zip(far[0], batch.loss_mask[0], strict=True)]
    _, masked = updated(with_engine(batch, far), replace(hp, is_correction=ISCorrection()), model)
    assert masked.steps[0]["is_ratio_min"] == 0.0  # row 0: the product of its ratios beyond 3


def test_a_masked_sequence_leaves_the_gradient_and_keeps_its_place_in_the_divisor():
    model = tiny_llama()
    batch = make_batch([1.0, 0.0, 0.5, 0.0], group_size=4)
    padded = batch.pad([0, 1, 2, 3])
    adv = torch.tensor([1.5, -1.0, 0.5, -1.0])
    lp = token_logprobs(model, padded.input_ids, padded.attention_mask)
    loss, _ = grpo_loss(lp, lp.detach(), None, adv, padded.loss_mask, clip_low=0.2, clip_high=0.2, beta=0.0,
                        is_weights=torch.tensor([[1.0], [0.0], [1.0], [1.0]]))  # row 1 masked ([4, 1])
    dropped = padded.loss_mask.clone()
    dropped[1] = 0
    lp2 = token_logprobs(model, padded.input_ids, padded.attention_mask)
    without, _ = grpo_loss(lp2, lp2.detach(), None, adv, dropped, clip_low=0.2, clip_high=0.2, beta=0.0,
                           num_tokens=padded.loss_mask.sum())  # fmt: skip
    grads = torch.autograd.grad(loss, list(model.parameters()))
    grads_without = torch.autograd.grad(without, list(model.parameters()))
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(grads, grads_without, strict=True))
    assert float(loss.detach()) == pytest.approx(float(without.detach()))


def test_correction_without_engine_logprobs_is_refused_in_one_line():
    model = tiny_llama()
    hp = UpdateHyperparams(lr=1e-3, is_correction=ISCorrection())
    with pytest.raises(ValueError, match="engine's log-probs"):
        grpo_update(model, None, make_optimizer(model, hp.lr), make_batch(SIGNAL), hp)
