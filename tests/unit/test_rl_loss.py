"""GRPO maths against hand-computed values: group advantages and the clipped, KL-penalised loss."""

import math

import pytest
import torch

from coevolve.rl.advantages import group_advantages
from coevolve.rl.loss import grpo_loss

# ---------------------------------------------------------------- advantages


def test_group_advantages_two_groups_by_hand():
    # group 7: rewards 1, 0, 0, 1 -> mean 0.5, population std 0.5 -> +-1
    # group 3: rewards 0, 0, 3    -> mean 1, population std sqrt(2) -> -1/sqrt2, -1/sqrt2, 2/sqrt2
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([7, 7, 3, 3, 7, 7, 3])
    adv = group_advantages(rewards, groups, eps=0.0)
    s = math.sqrt(2)
    expected = torch.tensor([1.0, -1.0, -1 / s, 2 / s, -1.0, 1.0, -1 / s])
    torch.testing.assert_close(adv, expected)


def test_group_advantages_eps_in_denominator():
    adv = group_advantages(torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), eps=0.5)
    torch.testing.assert_close(adv, torch.tensor([-0.5, 0.5]))  # (+-0.5) / (0.5 + 0.5)


def test_zero_variance_group_is_exactly_zero():
    # 0.1 * 3 is not exactly representable: the mean is off by rounding, the advantage must not be
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 0.7])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])  # group 2 has a single rollout
    adv = group_advantages(rewards, groups)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert adv[5].item() == 0.0
    assert adv[3] > 0 > adv[4]


def test_group_advantages_empty_and_integer_rewards():
    assert group_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)
    adv = group_advantages(torch.tensor([0, 2]), torch.tensor([1, 1]), eps=0.0)
    assert adv.dtype == torch.get_default_dtype()
    torch.testing.assert_close(adv, torch.tensor([-1.0, 1.0]))


# ---------------------------------------------------------------- grpo_loss: a 2x3 case by hand
#
# clip range [0.8, 1.28], beta = 0.1, old log-prob -1 everywhere, logp = -1 + ln(ratio).
#   row 0, A = +1:   ratios 1.0, 1.5 (high clip active), masked (logp = -inf garbage)
#   row 1, A = -0.5: ratios 0.9, 0.7 (low clip active), 1.1
# per-token surrogate -min(rA, clip(r)A): -1, -1.28 | 0.45, 0.40, 0.55   -> sum -0.88
# ref - logp = d:  0, ln2 | ln2, -ln2, 0;  k3 = e^d - d - 1:  0, 1-ln2 | 1-ln2, ln2-1/2, 0
# N = 5 tokens;  loss = (-0.88 + 0.1 * (3/2 - ln2)) / 5
# d loss / d logp = ( -rA [unclipped only] + beta (1 - e^d) ) / N:
#   row 0: (-1 + 0) / 5 = -0.2,  (0 - 0.1) / 5 = -0.02,  0 (masked)
#   row 1: (0.45 - 0.1) / 5 = 0.07,  (0 + 0.05) / 5 = 0.01,  0.55 / 5 = 0.11

LN2 = math.log(2.0)
HP = {"clip_low": 0.2, "clip_high": 0.28, "beta": 0.1}


def _hand_case():
    ratios = torch.tensor([[1.0, 1.5, 1.0], [0.9, 0.7, 1.1]], dtype=torch.float64)
    old = torch.full((2, 3), -1.0, dtype=torch.float64)
    lp = old + ratios.log()
    lp[0, 2] = float("-inf")  # garbage on a masked position
    d = torch.tensor([[0.0, LN2, 5.0], [LN2, -LN2, 0.0]], dtype=torch.float64)
    ref = (lp + d).detach()
    ref[0, 2] = float("nan")
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    return lp.requires_grad_(), old, ref, adv, mask


def test_grpo_loss_matches_hand_computed_value_and_metrics():
    lp, old, ref, adv, mask = _hand_case()
    loss, m = grpo_loss(lp, old, ref, adv, mask, **HP)
    expected = (-0.88 + 0.1 * (1.5 - LN2)) / 5
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert m.loss == pytest.approx(expected, abs=1e-12)
    assert m.pg_loss == pytest.approx(-0.88 / 5, abs=1e-12)
    assert m.kl == pytest.approx((1.5 - LN2) / 5, abs=1e-12)
    assert m.clip_fraction == pytest.approx(0.4)
    assert m.clip_low_fraction == pytest.approx(0.2)
    assert m.clip_high_fraction == pytest.approx(0.2)
    assert m.ratio_mean == pytest.approx(5.2 / 5)
    assert m.tokens == 5


def test_grpo_loss_gradient_matches_hand_derivation_and_masked_is_zero():
    lp, old, ref, adv, mask = _hand_case()
    loss, _ = grpo_loss(lp, old, ref, adv, mask, **HP)
    loss.backward()
    expected = torch.tensor([[-0.2, -0.02, 0.0], [0.07, 0.01, 0.11]], dtype=torch.float64)
    torch.testing.assert_close(lp.grad, expected, rtol=0, atol=1e-12)
    assert lp.grad[0, 2].item() == 0.0  # exactly, despite -inf logp and NaN ref there


def test_grpo_loss_float_mask_and_no_reference_when_beta_zero():
    lp, old, _, adv, mask = _hand_case()
    loss, m = grpo_loss(lp, old, None, adv, mask.float(), clip_low=0.2, clip_high=0.28, beta=0.0)
    assert loss.item() == pytest.approx(-0.88 / 5)
    assert m.kl == 0.0
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(lp, old, None, adv, mask, **HP)


def test_grpo_loss_empty_mask_is_zero_not_nan():
    lp = torch.randn(2, 4, requires_grad=True)
    loss, m = grpo_loss(lp, lp.detach(), lp.detach(), torch.ones(2), torch.zeros(2, 4), **HP)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(lp.grad, torch.zeros(2, 4))
    assert all(math.isfinite(v) for v in m.as_dict().values())
    assert m.tokens == 0


def test_num_tokens_makes_micro_batches_add_up_to_the_full_batch():
    g = torch.Generator().manual_seed(0)
    base = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    old = base + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    ref = base + 0.3 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.2, -0.4, 0.0, -0.8], dtype=torch.float64)
    mask = torch.rand(4, 6, generator=g) > 0.3
    mask[1] = False  # a row with no policy tokens at all

    full_lp = base.clone().requires_grad_()
    full, _ = grpo_loss(full_lp, old, ref, adv, mask, **HP)
    full.backward()

    parts_lp = base.clone().requires_grad_()
    n = int(mask.sum())
    total = 0.0
    for rows in (slice(0, 2), slice(2, 4)):
        part, _ = grpo_loss(parts_lp[rows], old[rows], ref[rows], adv[rows], mask[rows], **HP, num_tokens=n)
        part.backward()
        total += part.item()
    assert total == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(parts_lp.grad, full_lp.grad, rtol=0, atol=1e-12)
