"""The inference-engine contract: token ids in, sampled token ids and their log-probs out.

Rollout, exploration and evaluation talk to the policy only through `Engine`, so the in-process
transformers engine (`llm.hf_engine.HfEngine`, CPU default) and server-backed engines (vLLM, SGLang or a
hosted OpenAI-compatible API) are interchangeable. The rollout keeps the exact ids an engine sampled and
never re-tokenizes text for training; the per-token log-probs are those of the sampling distribution
before top-p truncation, i.e. `log_softmax(logits / temperature)`, matching what the trainer recomputes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length"]


class OpenAIEngineError(RuntimeError):
    """A server behind an OpenAI-compatible engine refused a request, or kept failing after the retries."""


@dataclass(frozen=True)
class SamplingParams:
    """How to decode. `greedy` ignores temperature and top_p and reports log-probs at temperature 1."""

    temperature: float = 0.8
    """Softmax temperature; must be > 0 unless `greedy`."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it. Does not change the reported log-probs."""
    max_new_tokens: int = 128
    """Cap on generated tokens per prompt; hitting it gives finish_reason "length"."""
    greedy: bool = False
    """Take the argmax token at every step."""
    seed: int | None = None
    """Seed for reproducible sampling; None draws fresh randomness."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end a completion, on top of the tokenizer's end-of-sequence id(s)."""

    def __post_init__(self) -> None:
        if not self.greedy and not self.temperature > 0:
            raise ValueError(
                f"temperature must be > 0 when sampling (got {self.temperature}); use greedy=True"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def effective_temperature(self) -> float:
        """The temperature the log-probs are computed at: 1 for greedy decoding."""
        return 1.0 if self.greedy else self.temperature


@dataclass
class Completion:
    """One generated reply.

    `token_ids` are exactly the sampled ids, ending with the stop token when finish_reason is "stop";
    `logprobs[i]` is the log-probability of `token_ids[i]`; `text` decodes `token_ids` without the final
    stop token (special tokens inside the reply are kept).
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: FinishReason
    version: str = ""
    """The policy version that sampled it (the engine's `version` at the time); "" if unknown."""


@runtime_checkable
class Engine(Protocol):
    """A policy that completes token-id prompts. `version` names the weights it serves (set by the caller).
    An engine whose requests are served independently (a server batching continuously) says so with a class
    attribute `independent_requests = True`: the episode loop then drives each episode on its own
    (`agents/episodes.py`); without it, every live episode's next reply goes in one `generate` call."""

    tokenizer: Any
    version: str

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        progress: Callable[[int], None] | None = None,
        sessions: list[Hashable] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in prompt order; `progress(n)` after each n finished prompts.

        `sessions` names the episode of each prompt; an engine may reuse what it encoded for that session
        before (a prompt extends the previous context of its episode). Results must not depend on it.
        """
        ...

    def end_sessions(self, sessions: list[Hashable]) -> None:
        """Forget what was cached for these sessions (their episodes are over)."""
        ...

    def update_weights(self, source: Any) -> None:
        """Serve new weights: an HF checkpoint directory or a state dict."""
        ...
