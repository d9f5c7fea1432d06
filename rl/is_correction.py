"""Importance-sampling correction of the rollout engine's log-probs against the trainer's, as TRL's GRPOTrainer
does it (`vllm_importance_sampling_correction`, `vllm_importance_sampling_mode`, `vllm_importance_sampling_cap`).

An inference server (vLLM in bfloat16, its own kernels) samples from a distribution a little different from the
one the trainer computes: the update's ratio ``pi_theta / pi_old`` uses the trainer's ``pi_old``, so the tokens
are off-policy by ``pi_old / pi_engine``. Each policy token's loss (the clipped surrogate, not the KL term) is
multiplied by a weight made from that ratio, ``r = exp(old_logp_trainer - logp_engine)``:

    token_truncate     per token:  min(r_t, cap)
    token_mask         per token:  r_t, or 0 where r_t > cap
    sequence_truncate  per row:    min(prod_t r_t, cap) on each of its policy tokens
    sequence_mask      per row:    prod_t r_t, or 0 (the row leaves the gradient) where it is > cap

The sequence ratio is the product over the row's policy tokens (the exp of the summed log ratios), as TRL's;
there is no lower bound. The normaliser is not changed: a masked token still counts in the loss's divisor.

The weights carry no gradient (both log-probs are fixed). `weight_stats` gives the figures TRL logs,
`sampling/importance_sampling_ratio/{min,mean,max}` (the weights after the cap, over policy tokens, or over rows
at sequence level) and `sampling/sampling_logp_difference/{mean,max}` (|old - engine| per policy token).

Used by `rl.update.grpo_update` once per micro-batch, when `UpdateHyperparams.is_correction` is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

ISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
"""TRL's `vllm_importance_sampling_mode` values."""
IS_MODES: tuple[str, ...] = get_args(ISMode)


@dataclass(frozen=True)
class ISCorrection:
    """How the engine's log-probs are corrected (`train.vllm_importance_sampling_*`; TRL's defaults)."""

    mode: ISMode = "sequence_mask"
    cap: float = 3.0

    def __post_init__(self) -> None:
        if self.mode not in IS_MODES:
            raise ValueError(f"ISCorrection.mode: {self.mode!r} is not one of {', '.join(IS_MODES)}")
        if not self.cap > 0:
            raise ValueError(f"ISCorrection.cap: must be > 0, got {self.cap}")


@dataclass(frozen=True)
class WeightStats:
    """Sums of one micro-batch's weights for the update's metrics (`rl.update_metrics`)."""

    ratio_sum: float  # of the weights counted (policy tokens, or rows at sequence level)
    ratio_count: int
    ratio_min: float  # +inf / -inf when nothing is counted
    ratio_max: float
    diff_sum: float  # of |old - engine| over policy tokens
    diff_max: float
    tokens: int


def importance_weights(old_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor, correction: ISCorrection) -> Tensor:
    """The weight of each policy token's loss.

    Args:
        old_logprobs: ``[B, T]`` the trainer's log-probs of the sampled tokens before the update.
        engine_logprobs: ``[B, T]`` the engine's log-probs of the same tokens (as it sampled them).
        mask: ``[B, T]`` 1 on policy tokens; elsewhere neither log-prob is read.
        correction: mode and cap.

    Returns:
        ``[B, T]`` at token level, ``[B, 1]`` at sequence level (broadcasts over the row's tokens); float32,
        detached.
    """
    keep = mask.bool()  # [B, T]
    log_ratio = torch.where(keep, old_logprobs.detach().float() - engine_logprobs.float(), 0.0)  # [B, T]
    if correction.mode.startswith("sequence"):
        log_ratio = log_ratio.sum(dim=-1, keepdim=True)  # [B, 1]: log of the product over the row's tokens
    ratio = log_ratio.exp()
    if correction.mode.endswith("truncate"):
        return ratio.clamp(max=correction.cap)
    return ratio.masked_fill(ratio > correction.cap, 0.0)


def weight_stats(weights: Tensor, old_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor) -> WeightStats:
    """The micro-batch's figures: weights ``[B, T]`` or ``[B, 1]`` (from `importance_weights`), log-probs and
    mask ``[B, T]``. At sequence level a row counts once, if it has a policy token."""
    keep = mask.bool()  # [B, T]
    counted = weights[keep] if weights.shape == keep.shape else weights[keep.any(dim=-1, keepdim=True)]  # [n]
    diff = (old_logprobs.detach().float() - engine_logprobs.float()).abs()[keep]  # [tokens]
    return WeightStats(
        ratio_sum=float(counted.sum()), ratio_count=int(counted.numel()),
        ratio_min=float(counted.min()) if counted.numel() else float("inf"),
        ratio_max=float(counted.max()) if counted.numel() else float("-inf"),
        diff_sum=float(diff.sum()), diff_max=float(diff.max()) if diff.numel() else 0.0, tokens=int(diff.numel()),
    )  # fmt: skip
