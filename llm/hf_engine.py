"""`HfEngine`: the policy served in-process by transformers, batched, CPU by default.

Rollout hands it token-id prompts of different lengths; it left-pads them into sub-batches of
`batch_size` (prompts sorted by length so a sub-batch wastes little padding; a prompt repeated in a
sub-batch, like the K samples of a GRPO group, is prefilled once and its KV cache shared), decodes with a KV cache in
its own small sampling loop, and returns for every prompt the exact sampled ids and the log-probs
`log_softmax(logits / T)` of those ids under the raw model logits (before top-p truncation; T = 1 for
greedy). A completion stops at the first end-of-sequence or extra stop id, which it keeps; a finished
row leaves the batch and its KV cache, so long stragglers do not make finished rows cost compute.
Seeded sampling uses its own `torch.Generator` (the global RNG is untouched); results for a seed are
reproducible for the same prompts, batch size and machine, not across different batchings.

On CPU the trainer (`rl/`) updates this very model object in place, so between rounds nothing needs to
be reloaded; `update_weights` exists for the case where the trainer holds a different copy (another
device or process) and hands over a checkpoint directory or a state dict.

    from llm.models import load_model
    from llm.hf_engine import HfEngine
    from llm.engine import SamplingParams
    engine = HfEngine(*load_model("tiny-random-llama"))
    engine.generate([[1, 4093, 198]], SamplingParams(max_new_tokens=8, seed=0))
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from coevolve.llm.engine import Completion, SamplingParams
from coevolve.llm.kv_sessions import CachedPrefix, KvSessions, batch_cache, extract_row


class HfEngine:
    """transformers model + tokenizer behind the `Engine` protocol."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int = 16,
        version: str = "base",
        share_prompts: bool = True,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.version = version
        self.eos_ids = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.share_prompts = share_prompts
        """Prefill a prompt repeated within a sub-batch once (False: every row prefills its own copy)."""
        self.sessions = KvSessions()
        self.prefill_tokens = 0
        """Tokens encoded by prefill so far (decode steps not counted): what KV reuse saves."""

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        progress: Callable[[int], None] | None = None,
        sessions: list[Hashable] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in order; `progress(len(sub_batch))` after each sub-batch.

        `sessions` (one id per prompt, e.g. the episode) turn on KV reuse: a prompt that extends what its
        session encoded last time only prefills the new tokens (see `llm.kv_sessions`). Call
        `end_sessions` when an episode is over.
        """
        import torch

        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {i} is empty")
        if sessions is not None and len(sessions) != len(prompts):
            raise ValueError(f"{len(sessions)} sessions for {len(prompts)} prompts")
        stop = frozenset(self.eos_ids) | frozenset(sampling.stop_token_ids)
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.model.device).manual_seed(sampling.seed)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    ids = [sessions[i] for i in chunk] if sessions is not None else [None] * len(chunk)
                    batch = self._decode_batch([prompts[i] for i in chunk], ids, sampling, stop, generator)
                    for i, completion in zip(chunk, batch, strict=True):
                        results[i] = completion
                    if progress is not None:
                        progress(len(chunk))
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def end_sessions(self, sessions: list[Hashable]) -> None:
        """Free the cached prefixes of finished episodes."""
        self.sessions.drop(sessions)

    def _decode_batch(
        self,
        prompts: list[list[int]],
        sessions: list[Hashable | None],
        sampling: SamplingParams,
        stop: frozenset[int],
        generator: Any,
    ) -> list[Completion]:
        """Left-pad the uncached suffixes of `prompts` behind their cached prefixes and decode with a KV
        cache; a row leaves the batch at its first stop id, handing its cache to its session."""
        import torch

        device = self.model.device
        reused = [self.sessions.reusable(s, p) for s, p in zip(sessions, prompts, strict=True)]
        if self.share_prompts:
            reused = self._share_repeated_prompts(prompts, reused)
        cache, cache_mask, cached = batch_cache(reused, self.model.config)
        suffixes = [p[n:] for p, n in zip(prompts, cached, strict=True)]
        self.prefill_tokens += sum(map(len, suffixes))
        width = max(len(p) for p in suffixes)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in suffixes], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in suffixes], device=device)
        # Positions count real tokens only, so each row sees the positions it would see alone.
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + torch.tensor(cached, device=device)[:, None]
        if cache_mask is not None:
            mask = torch.cat([cache_mask.to(device), mask], dim=1)
        rows = list(range(len(prompts)))  # prompt index of each row still in the batch
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        for _ in range(sampling.max_new_tokens):
            out = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions,
                cache=cache, use_cache=True, logits_to_keep=1,
            )  # fmt: skip
            cache = out.cache
            token, logprob = sample_next(out.logits[:, -1, :].float(), sampling, generator)
            keep = []
            for j, (t, lp) in enumerate(zip(token.tolist(), logprob.tolist(), strict=True)):
                tokens[rows[j]].append(t)
                logprobs[rows[j]].append(lp)
                if t not in stop and len(tokens[rows[j]]) < sampling.max_new_tokens:
                    keep.append(j)
            kept = set(keep)
            self._hand_over(
                cache, mask, rows, [j for j in range(len(rows)) if j not in kept], prompts, tokens, sessions
            )
            if not keep:
                break
            if len(keep) < len(rows):  # finished rows leave the batch (and the cache): no more compute
                index = torch.tensor(keep, device=device)
                cache.reorder_cache(index)
                token, mask, positions = token[index], mask[index], positions[index]
                rows = [rows[j] for j in keep]
            ids = token[:, None]
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
            positions = positions[:, -1:] + 1
        return [self._completion(t, lp, stop) for t, lp in zip(tokens, logprobs, strict=True)]

    def _share_repeated_prompts(
        self, prompts: list[list[int]], reused: list[CachedPrefix | None]
    ) -> list[CachedPrefix | None]:
        """Prefill once a prompt that several uncached rows share (the K samples of a GRPO group).

        Its keys and values, for all but the last token, become those rows' cached prefix; the batch
        prefill then encodes one token per such row instead of the whole prompt.
        """
        import torch

        rows_of: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, (prompt, entry) in enumerate(zip(prompts, reused, strict=True)):
            if entry is None and len(prompt) > 1:
                rows_of[tuple(prompt)].append(i)
        repeated = [prompt for prompt, rows in rows_of.items() if len(rows) > 1]
        if not repeated:
            return reused
        device = self.model.device
        shared = [list(prompt[:-1]) for prompt in repeated]
        width = max(map(len, shared))
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in shared], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in shared], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)  # fmt: skip
        self.prefill_tokens += sum(map(len, shared))
        reused = list(reused)
        for j, prompt in enumerate(repeated):
            entry = extract_row(out.cache, j, mask[j], shared[j])
            for i in rows_of[prompt]:
                reused[i] = entry
        return reused

    def _hand_over(
        self,
        cache: Any,
        mask: Any,
        rows: list[int],
        finished: list[int],
        prompts: list[list[int]],
        tokens: list[list[int]],
        sessions: list[Hashable | None],
    ) -> None:
        """Store the cache rows of finished prompts in their sessions (all but the last sampled token,
        which was never fed to the model)."""
        for j in finished:
            session = sessions[rows[j]]
            if session is not None:
                encoded = prompts[rows[j]] + tokens[rows[j]][:-1]
                self.sessions.store(session, extract_row(cache, j, mask[j], encoded))

    def _completion(self, ids: list[int], logprobs: list[float], stop: frozenset[int]) -> Completion:
        stopped = ids[-1] in stop
        body = ids[:-1] if stopped else ids
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            text=self.tokenizer.decode(body, skip_special_tokens=False),
            finish_reason="stop" if stopped else "length",
            version=self.version,
        )

    def update_weights(self, source: Any) -> None:
        """Load new weights into the served model from a checkpoint directory, a state dict or a module.

        On CPU the trainer trains `self.model` itself, so passing that object (or not calling this at
        all) is a no-op. `version` is left to the caller.
        """
        import torch

        if source is self.model:
            return
        if isinstance(source, torch.nn.Module):
            state = source.state_dict()
        elif isinstance(source, str | os.PathLike):
            state = read_checkpoint(Path(source))
        elif isinstance(source, Mapping):
            state = source
        else:
            raise TypeError(
                f"update_weights takes a checkpoint directory or a state dict, not {type(source)}"
            )
        own = self.model.state_dict()
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        # Tied weights (lm_head = embed_tokens) are saved once; they count as loaded through their twin.
        loaded = {own[k].data_ptr() for k in state if k in own}
        missing = [k for k in missing if own[k].data_ptr() not in loaded]
        if missing or unexpected:
            raise ValueError(
                f"weights do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )


def sample_next(logits: Any, sampling: SamplingParams, generator: Any = None) -> tuple[Any, Any]:
    """Pick one token per row of `logits` [B, V]; return (tokens [B], their log-probs [B]).

    The log-prob is taken from log_softmax(logits / T) before any top-p truncation, so it describes the
    same distribution the trainer recomputes from its own logits.
    """
    import torch

    logprobs = torch.log_softmax(logits / sampling.effective_temperature, dim=-1)
    if sampling.greedy:
        token = logits.argmax(dim=-1)
    else:
        probs = logprobs.exp()
        if sampling.top_p < 1.0:
            probs = _top_p(probs, sampling.top_p)
        token = _draw(probs, generator)
    return token, logprobs.gather(-1, token[:, None]).squeeze(-1)


def _draw(probs: Any, generator: Any) -> Any:
    """One index per row with probability proportional to `probs` [B, V], by inverting the CDF.

    Equivalent to torch.multinomial(probs, 1), and much faster on CPU for a large vocabulary: one
    cumulative sum and one binary search per row. With side="right" a zero-probability token is never
    chosen, even for u = 0.
    """
    import torch

    cdf = probs.double().cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, side="right").squeeze(-1).clamp(max=probs.shape[-1] - 1)


def _top_p(probs: Any, top_p: float) -> Any:
    """Zero every token outside the smallest set whose mass reaches `top_p` (the top token always stays)."""
    import torch

    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The full-model state dict saved in an HF checkpoint directory (safetensors, possibly sharded)."""
    from safetensors.torch import load_file

    files = sorted(f for f in path.glob("*.safetensors") if not f.name.startswith("adapter_"))
    if not files:
        raise FileNotFoundError(f"no full-model *.safetensors weights in {path}")
    state: dict[str, Any] = {}
    for file in files:
        state.update(load_file(file))
    return state


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """End-of-sequence ids from the tokenizer and the model's generation config (it may list several)."""
    ids = {tokenizer.eos_token_id}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(config_eos if isinstance(config_eos, list | tuple) else [config_eos])
    ids.discard(None)
    if not ids:
        raise ValueError("the tokenizer has no eos token and the model's generation config names none")
    return tuple(sorted(ids))
