"""Per-token log-probabilities of a token sequence under a causal LM.

Both sides of the GRPO ratio (and the KL reference) come from here, so they describe the same
distribution: logits are divided by the sampling temperature, exactly as the rollout engine did.

Memory: a ``[B, T, V]`` float32 ``log_softmax`` copy of the logits is never materialised. Each row is
upcast on its own and reduced with ``logsumexp`` + ``gather`` (``log p = z_y - logsumexp(z)``), so the
extra peak memory is one row's ``[T, V]`` float32 logits rather than the whole batch's.

Callers pad on the right; entries at padding and at position 0 are 0.
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


def token_logprobs(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, *, temperature: float = 1.0
) -> Tensor:
    """``out[b, t] = log p(input_ids[b, t] | input_ids[b, :t])`` under ``logits / temperature``.

    Args:
        model: a causal LM returning ``.logits`` of shape ``[B, T, V]`` (HF or peft model).
        input_ids: ``[B, T]`` int64, right-padded.
        attention_mask: ``[B, T]`` 1 on real tokens.

    Returns:
        ``[B, T]`` float32; column 0 and padded positions are 0. Differentiable if grad is enabled.
    """
    if temperature <= 0:
        raise ValueError(f"token_logprobs: temperature must be > 0, got {temperature}")
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    lp = selective_log_softmax(logits[:, :-1, :], input_ids[:, 1:], temperature=temperature)  # [B, T-1]
    lp = torch.cat([lp.new_zeros(lp.shape[0], 1), lp], dim=1)  # [B, T]
    return torch.where(attention_mask.bool(), lp, 0.0)
