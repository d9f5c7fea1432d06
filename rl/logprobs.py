"""Per-token log-probabilities of a token sequence under a causal LM.

Both sides of the GRPO ratio (and the KL reference) come from here, so they describe the same
distribution: logits are divided by the sampling temperature, exactly as the rollout engine did.

Memory: a ``[B, T, V]`` float32 ``log_softmax`` copy of the logits is never materialised. Each row is
upcast on its own and reduced with ``logsumexp`` + ``gather`` (``log p = z_y - logsumexp(z)``), so the
extra peak memory is one row's ``[T, V]`` float32 logits rather than the whole batch's.

Only the positions that are scored need logits at all: with ``score_mask`` (the loss mask: policy tokens),
the model projects onto the vocabulary only the hidden states that predict a scored token of some row
(``logits_to_keep``), so prompt and tool-output positions, most of a multi-turn sequence, cost no
``[T, V]`` logits, forward or backward.

Callers pad on the right; entries at padding and at position 0 are 0, and so are entries no row scores.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def selective_log_softmax(logits: Tensor, index: Tensor, *, temperature: float = 1.0) -> Tensor:
    """``log_softmax(logits / temperature)`` gathered at ``index``, computed row by row in float32.

    Args:
        logits: ``[B, T, V]`` any float dtype.
        index: ``[B, T]`` int64 token ids.

    Returns:
        ``[B, T]`` float32 log-probs.
    """
    rows = []
    for row_logits, row_index in zip(logits, index, strict=True):  # [T, V], [T]
        z = row_logits.float()
        if temperature != 1.0:
            z = z / temperature
        picked = z.gather(-1, row_index[:, None]).squeeze(-1)  # [T]
        rows.append(picked - torch.logsumexp(z, dim=-1))
    return torch.stack(rows) if rows else logits.new_zeros(index.shape, dtype=torch.float32)


def scored_targets(score_mask: Tensor, start: int = 1) -> Tensor:
    """Positions ``t >= start`` (1D, ascending) where some row of ``score_mask [B, T]`` scores its token."""
    return torch.nonzero(score_mask[:, start:].any(dim=0)).flatten() + start


def scatter_logprobs(logits: Tensor, ids: Tensor, targets: Tensor, *, temperature: float) -> Tensor:
    """``[B, T]`` log-probs of ``ids [B, T]`` at ``targets`` from ``logits [B, len(targets), V]`` (the
    positions before them); 0 elsewhere."""
    width = ids.shape[1]
    picked = selective_log_softmax(logits, ids[:, targets], temperature=temperature)
    out = picked.new_zeros(ids.shape[0], width)
    out[:, targets] = picked
    return out


def token_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    temperature: float = 1.0,
    score_mask: Tensor | None = None,
) -> Tensor:
    """``out[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`` under ``logits / temperature``.

    Args:
        model: a causal LM returning ``.logits`` of shape ``[B, T, V]`` (HF or peft model).
        input_ids: ``[B, T]`` int64, right-padded.
        attention_mask: ``[B, T]`` 1 on real tokens.
        score_mask: ``[B, T]``, nonzero where a log-prob is needed; None: everywhere.

    Returns:
        ``[B, T]`` float32; column 0, padded positions and positions no row scores are 0.
        Differentiable if grad is enabled.
    """
    if temperature <= 0:
        raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
    if score_mask is None:
        targets = torch.arange(1, input_ids.shape[1], device=input_ids.device)
    else:
        targets = scored_targets(score_mask.bool())
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=targets - 1
    ).logits  # [B, len(targets), V]
    lp = scatter_logprobs(logits, input_ids, targets, temperature=temperature)
    return torch.where(attention_mask.bool(), lp, 0.0)
