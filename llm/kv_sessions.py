"""KV-cache reuse across the turns of an episode: prefill each token of a context once.

A multi-turn episode sends the engine its whole context at every reply: the prompt, every earlier reply,
every tool result. Without reuse each reply re-encodes all of it, so prefill grows with the square of
the number of replies. With a session per episode the engine keeps the keys and values of the longest
context it has already encoded; the next call encodes only the new suffix (the last sampled token, the
tool results and the next generation prompt).

Rows of one batch have different cached lengths and different suffix lengths. They are aligned by
left-padding both parts: `[pad.. cached_i][pad.. suffix_i]`. The attention mask has a hole where a row's
suffix padding sits, and positions are each row's real token positions, so every row computes what it
would compute alone (RoPE was applied to the cached keys at their real positions when they were made).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


@dataclass
class CachedPrefix:
    """Keys/values `[heads, length, dim]` per layer for the tokens `tokens` (in order)."""

    tokens: list[int]
    layers: list[tuple[Any, Any]]


class KvSessions:
    """The cached prefix of each live session (episode); `drop` when the episode ends."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, CachedPrefix] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def reusable(self, session: Hashable | None, prompt: list[int]) -> CachedPrefix | None:
        """The session's cached prefix if `prompt` extends it by at least one token."""
        entry = self._entries.get(session) if session is not None else None
        if entry is None or len(entry.tokens) >= len(prompt) or prompt[: len(entry.tokens)] != entry.tokens:
            return None
        return entry

    def store(self, session: Hashable, entry: CachedPrefix) -> None:
        self._entries[session] = entry

    def drop(self, sessions: list[Hashable]) -> None:
        for session in sessions:
            self._entries.pop(session, None)


def batch_cache(entries: list[CachedPrefix | None], config: Any) -> tuple[Any, Any, list[int]]:
    """Left-padded `DynamicCache` for a batch, its 2-D mask `[B, C]`, and each row's cached length."""
    import torch
    from transformers.cache_utils import DynamicCache

    lengths = [0 if e is None else len(e.tokens) for e in entries]
    width = max(lengths)
    if width == 0:
        return None, None, lengths
    template = next(e for e in entries if e is not None).layers
    mask = torch.tensor([[0] * (width - n) + [1] * n for n in lengths])
    layers = []
    for index, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((len(entries), k0.shape[0], width, k0.shape[-1]))
        values = v0.new_zeros((len(entries), v0.shape[0], width, v0.shape[-1]))
        for row, entry in enumerate(entries):
            if entry is not None:
                keys[row, :, width - lengths[row]:] = entry.layers[index][0]
                values[row, :, width - lengths[row]:] = entry.layers[index][1]
        layers.append((keys, values))
    return DynamicCache(ddp_cache_data=layers, config=config), mask, lengths


def extract_row(cache: Any, row: int, mask_row: Any, tokens: list[int]) -> CachedPrefix:
    """Row `row`'s real (unmasked) keys and values from a batch cache, as a prefix for `tokens`."""
    keep = mask_row.bool()
    layers = [(layer.keys[row][:, keep].clone(), layer.values[row][:, keep].clone()) for layer in cache.layers]
    if layers and layers[0][0].shape[1] != len(tokens):
        raise RuntimeError(f"cache holds {layers[0][0].shape[1]} positions for {len(tokens)} tokens")
    return CachedPrefix(tokens, layers)
