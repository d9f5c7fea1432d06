"""Log-probs of a group's samples with their common token prefix encoded once.

The K samples of a GRPO group start with the same prompt (system text, tool docs, demonstrations,
query), usually most of each sequence. The plain path encodes that prompt K times, forward and backward,
in every log-prob pass (old, reference) and in the update. Here it is encoded once:

1. The rows' longest common prefix minus one token, ``prefix = ids[:L]``, runs through the model as a
   batch of one with ``use_cache=True``; its logits give the log-probs of tokens ``1..L``, which are the
   same for every row (token ``L`` is still common because ``L = lcp - 1``).
2. Its keys and values are broadcast to the K rows (a view, no copy) and the right-padded suffixes
   ``ids[L:]`` run as one batch on top, with positions ``L, L+1, ...``; their logits give the log-probs
   of tokens ``L+1..`` of each row.

Gradients flow back through the broadcast cache into the single prefix pass, where autograd sums them
over the rows: the result, loss and gradients equal the plain per-row computation up to float rounding
(tested to 1e-5, tool-output tokens masked in the suffixes included).

Supported: decoder-only models whose forward takes ``cache``/``position_ids`` and whose only
positional information is RoPE applied from ``position_ids`` (`SUPPORTED_MODEL_TYPES`). Anything else
takes the plain path, with one warning per model type.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from rl.logprobs import selective_log_softmax

log = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen3_moe"})
_warned: set[str] = set()


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by every row (0 for no rows)."""
    if not rows:
        return 0
    first, n = rows[0], min(len(r) for r in rows)
    for row in rows[1:]:
        i = 0
        while i < n and row[i] == first[i]:
            i += 1
        n = i
    return n


def supports_shared_prefix(model: nn.Module) -> bool:
    """Whether `model` (or the base model under a peft adapter) can take the shared-prefix path.

    Logs a warning once per unsupported model type.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type in SUPPORTED_MODEL_TYPES:
        return True
    if model_type not in _warned:
        _warned.add(str(model_type))
        log.warning(
            "shared-prefix log-probs are not supported for model type %r; using the plain path "
            "(each sample encodes its whole prompt)",
            model_type,
        )
    return False


def shared_prefix_logprobs(
    model: nn.Module, rows: Sequence[Sequence[int]], *, temperature: float = 1.0, pad_token_id: int = 0
) -> Tensor | None:
    """``out[b, t] = log p(rows[b][t] | rows[b][:t])``, right-padded to the longest row, like
    `rl.logprobs.token_logprobs` on the padded batch; column 0 and padding are 0.

    Returns None when sharing saves nothing (fewer than two rows, or no common token): the caller then
    takes the plain path.
    """
    if temperature <= 0:
        raise ValueError(f"shared_prefix_logprobs: temperature must be > 0, got {temperature}")
    shared = common_prefix_length(rows) - 1  # L: token L is common too, so its log-prob is shared
    if len(rows) < 2 or shared < 1:
        return None
    device = next(model.parameters()).device
    prefix = torch.tensor([list(rows[0][: shared + 1])], dtype=torch.long, device=device)  # [1, L+1]
    out = model(input_ids=prefix[:, :shared], use_cache=True)
    prefix_lp = selective_log_softmax(out.logits, prefix[:, 1:], temperature=temperature)  # [1, L]

    widths = [len(r) - shared for r in rows]
    width = max(widths)  # S
    suffix = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), shared + width), dtype=torch.long, device=device)
    mask[:, :shared] = 1
    for b, (row, n) in enumerate(zip(rows, widths, strict=True)):
        suffix[b, :n] = torch.tensor(list(row[shared:]), dtype=torch.long, device=device)
        mask[b, shared : shared + n] = 1
    positions = torch.arange(shared, shared + width, device=device).expand(len(rows), width)
    cache = _broadcast_cache(out.cache, len(rows), model)
    logits = model(input_ids=suffix, attention_mask=mask, position_ids=positions, cache=cache,
                   use_cache=True).logits  # fmt: skip
    suffix_lp = selective_log_softmax(logits[:, :-1], suffix[:, 1:], temperature=temperature)  # [B, S-1]

    lp = torch.cat([
        prefix_lp.new_zeros(len(rows), 1), prefix_lp.expand(len(rows), shared), suffix_lp
    ], dim=1)  # fmt: skip  # [B, L+S]
    return torch.where(mask.bool(), lp, 0.0)


def _broadcast_cache(cache: object, batch: int, model: nn.Module) -> object:
    """A cache whose every layer holds the batch-of-one prefix keys/values expanded to ``batch`` rows."""
    from transformers.cache_utils import DynamicCache

    layers = [
        (layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1))
        for layer in cache.layers
    ]
    return DynamicCache(ddp_cache_data=layers, config=model.config)
