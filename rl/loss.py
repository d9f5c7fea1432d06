"""The GRPO loss: PPO-clipped surrogate per policy token plus a k3 KL penalty, token-normalised.

Paper objective (see docs, "Objective"), written as a loss to minimise:

    L = 1/N * sum_{k,t in policy tokens} [ -min(r_kt A_k, clip(r_kt, 1-eps_lo, 1+eps_hi) A_k)
                                            + beta * KL_kt ]
    r_kt  = exp(logp_kt - old_logp_kt)
    KL_kt = exp(ref_kt - logp_kt) - (ref_kt - logp_kt) - 1          (k3 estimator, >= 0)

N is a scalar, the number of policy tokens of the whole mini-batch ("token-level normalisation",
`train.loss_normalization: batch_tokens`), not of one sequence. When a mini-batch is split into
micro-batches for gradient accumulation, pass the mini-batch's N as ``num_tokens`` to every micro-batch
call: the sum of the micro-batch losses (and gradients) then equals the full-batch loss (and gradient).
The other normalisations divide each row's token losses by a divisor of its own (``num_tokens`` a ``[B]``
tensor, from `rl.plan.row_divisors`): ``N_g * G`` (the paper's formula, each group over its own tokens,
``group_tokens``) or ``|tau_i| * B`` (the original GRPO's per-sequence mean, ``sequence``).

Masked positions (prompt, tool output, padding) contribute exactly zero loss and zero gradient, even
if their log-probs are garbage (e.g. -inf): they are replaced with zeros before any arithmetic.

Called by `rl.update.grpo_update` once per micro-batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class LossMetrics:
    """Detached statistics of one `grpo_loss` call.

    `loss` and `pg_loss` use the same normalisation as the returned loss (so they add up across the
    micro-batches of a mini-batch); the other ratios are means over this call's masked tokens.
    """

    loss: float
    pg_loss: float
    kl: float
    clip_fraction: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float
    tokens: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def clipped_surrogate(
    log_ratio: Tensor, advantages: Tensor, *, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token PPO loss ``-min(r A, clip(r) A)`` and where each clip side is active.

    Args:
        log_ratio: ``[B, T]`` logp - old_logp.
        advantages: ``[B, 1]`` or ``[B, T]``.

    Returns:
        ``[B, T]`` loss, ``[B, T]`` bool low-clip active (A < 0, r < 1-eps_lo),
        ``[B, T]`` bool high-clip active (A > 0, r > 1+eps_hi). Where a clip is active the
        gradient of the token is zero.
    """
    ratio = log_ratio.exp()  # [B, T]
    unclipped = ratio * advantages  # [B, T]
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages  # [B, T]
    loss = -torch.minimum(unclipped, clipped)  # [B, T]
    low = (advantages < 0) & (ratio < 1.0 - clip_low)  # [B, T]
    high = (advantages > 0) & (ratio > 1.0 + clip_high)  # [B, T]
    return loss, low, high


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref): ``exp(d) - d - 1`` with d = ref - logp.

    Shapes: ``[B, T]`` -> ``[B, T]``; non-negative, unbiased, zero when the policies agree.
    """
    d = ref_logprobs - logprobs  # [B, T]
    return d.exp() - d - 1.0


def _masked_mean(values: Tensor, mask: Tensor, count: Tensor) -> float:
    """Mean of ``values[mask]`` (both ``[B, T]``) as a float; 0 when the mask is empty."""
    return float((values * mask).sum() / count.clamp(min=1))


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    ref_logprobs: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    beta: float,
    num_tokens: int | float | Tensor | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, LossMetrics]:
    """GRPO loss of one (micro-)batch.

    Args:
        logprobs: ``[B, T]`` log-probs of the taken tokens under the current policy (with grad).
        old_logprobs: ``[B, T]`` same under the policy that sampled them (no grad).
        ref_logprobs: ``[B, T]`` same under the reference policy, or None when ``beta == 0``.
        advantages: ``[B]`` one advantage per sequence.
        mask: ``[B, T]`` bool/float, 1 on policy tokens.
        clip_low, clip_high: PPO clip range ``[1 - clip_low, 1 + clip_high]``.
        beta: KL weight.
        num_tokens: normaliser N, a scalar or ``[B]`` one divisor per row; default ``mask.sum()``. Clamped
            to >= 1, so an empty mask gives 0.
        is_weights: ``[B, T]`` or ``[B, 1]`` importance-sampling weights of the engine's samples
            (`rl.is_correction`), multiplying each token's surrogate loss (not the KL term), as TRL's; None: none.

    Returns:
        Scalar loss (sum of masked per-token losses / N, or / the row's divisor) and its `LossMetrics`.
    """
    if beta != 0 and ref_logprobs is None:
        raise ValueError("grpo_loss: ref_logprobs is required when beta != 0")
    keep = mask.bool()  # [B, T]
    weight = keep.to(logprobs.dtype)  # [B, T]
    count = weight.sum()  # []
    denom = (
        count if num_tokens is None else torch.as_tensor(num_tokens, dtype=count.dtype, device=count.device)
    ).clamp(min=1)
    if denom.dim() == 1:  # a divisor per row ([B]), the same for all its tokens
        scaled, denom = weight / denom[:, None], torch.ones_like(count)  # [B, T], []
    else:
        scaled = weight  # [B, T]; divided by the scalar N below

    lp = torch.where(keep, logprobs, 0.0)  # [B, T]; masked garbage never reaches exp()
    log_ratio = lp - torch.where(keep, old_logprobs, 0.0)  # [B, T]
    adv = advantages.to(logprobs.dtype)[:, None]  # [B, 1]
    pg_tok, low, high = clipped_surrogate(log_ratio, adv, clip_low=clip_low, clip_high=clip_high)
    if is_weights is not None:
        pg_tok = pg_tok * is_weights  # [B, T]
    pg_loss = (pg_tok * scaled).sum() / denom  # []

    if ref_logprobs is not None and beta != 0:
        kl_tok = k3_kl(lp, torch.where(keep, ref_logprobs, 0.0))  # [B, T]
    else:
        kl_tok = torch.zeros_like(lp)
    loss = pg_loss + beta * (kl_tok * scaled).sum() / denom  # []

    with torch.no_grad():
        metrics = LossMetrics(
            loss=float(loss),
            pg_loss=float(pg_loss),
            kl=_masked_mean(kl_tok, weight, count),
            clip_fraction=_masked_mean((low | high).to(weight.dtype), weight, count),
            clip_low_fraction=_masked_mean(low.to(weight.dtype), weight, count),
            clip_high_fraction=_masked_mean(high.to(weight.dtype), weight, count),
            ratio_mean=_masked_mean(log_ratio.exp(), weight, count),
            tokens=int(count),
        )
    return loss, metrics
