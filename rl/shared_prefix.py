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

from coevolve.rl.logprobs import scatter_logprobs, scored_targets

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
    model: nn.Module,
    rows: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    pad_token_id: int = 0,
    score_rows: Sequence[Sequence[int]] | None = None,
) -> Tensor | None:
    """``out[b, t] = log p(rows[b][t] | rows[b][:t])``, right-padded to the longest row, like
    `rl.logprobs.token_logprobs` on the padded batch; column 0 and padding are 0. With ``score_rows``
    (one 0/1 list per row, e.g. the loss masks) only positions some row scores get logits; others are 0.

    Returns None when sharing saves nothing (fewer than two rows, or no common token): the caller then
    takes the plain path.
    """
    if temperature <= 0:
        raise ValueError(f"shared_prefix_logprobs: temperature must be > 0, got {temperature}")
    shared = common_prefix_length(rows) - 1  # L: token L is common too, so its log-prob is shared
    if len(rows) < 2 or shared < 1:
        return None
    device = next(model.parameters()).device
    widths = [len(r) - shared for r in rows]
    width = max(widths)  # S
    ids = torch.full((len(rows), shared + width), pad_token_id, dtype=torch.long, device=device)  # [B, L+S]
    mask = torch.zeros_like(ids)
    score = torch.zeros_like(ids, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(list(row), dtype=torch.long, device=device)
        mask[b, : len(row)] = 1
        score[b, 1 : len(row)] = True if score_rows is None else torch.tensor(list(score_rows[b][1:])).bool()

    # the prefix ids[:, :L] once: it predicts tokens 1..L of every row
    prefix = ids[:1, : shared + 1]  # [1, L+1]
    targets = scored_targets(score[:, : shared + 1])
    out = model(input_ids=prefix[:, :shared], use_cache=True, logits_to_keep=targets - 1)
    prefix_lp = scatter_logprobs(out.logits, prefix, targets, temperature=temperature)  # [1, L+1]

    # the suffixes ids[:, L:] on top of the broadcast cache: they predict tokens L+1.. of each row
    suffix = ids[:, shared:]  # [B, S]
    targets = scored_targets(score, start=shared + 1) - shared  # in suffix coordinates, >= 1
    positions = torch.arange(shared, shared + width, device=device).expand(len(rows), width)
    cache = _broadcast_cache(out.cache, len(rows), model)
    logits = model(input_ids=suffix, attention_mask=mask, position_ids=positions, cache=cache,
                   use_cache=True, logits_to_keep=targets - 1).logits  # fmt: skip
    suffix_lp = scatter_logprobs(logits, suffix, targets, temperature=temperature)  # [B, S]

    lp = torch.cat([prefix_lp.expand(len(rows), shared + 1), suffix_lp[:, 1:]], dim=1)  # [B, L+S]
    return torch.where(mask.bool(), lp, 0.0)


def _broadcast_cache(cache: object, batch: int, model: nn.Module) -> object:
    """A cache whose every layer holds the batch-of-one prefix keys/values expanded to ``batch`` rows."""
    from transformers.cache_utils import DynamicCache

    layers = [
        (layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1))
        for layer in cache.layers
    ]
    return DynamicCache(ddp_cache_data=layers, config=model.config)
