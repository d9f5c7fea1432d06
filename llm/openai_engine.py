"""`OpenAIEngine`: a model behind an OpenAI-compatible HTTP server (vLLM, SGLang, a hosted API).

Two paths, both over httpx with timeouts and retries (connection errors, timeouts, 429 and 5xx, with
exponential backoff; other 4xx fail at once with the server's message):

- `chat(conversations, sampling)`: text in, text out through `/chat/completions`. The teacher uses it to
  reflect on trajectories and to abstract tasks.
- `generate(prompts, sampling)`: the `Engine` contract (token ids in, `Completion`s out) through
  `/completions`. With `token_ids=True` the prompt goes as token ids and the server is asked for
  `logprobs` with `return_tokens_as_token_ids` (vLLM), so the completion keeps the exact sampled ids and
  their log-probs, as rollouts need. With `token_ids=False` (a server whose tokenizer differs from the
  local one) the prompt is decoded to text by the local `tokenizer` and the reply re-encoded with it;
  log-probs are then zeros, good for exploration episodes, never for training.

    engine = OpenAIEngine("http://127.0.0.1:8000/v1", "Qwen/Qwen3-4B", tokenizer=tok, token_ids=True)
    engine.chat([[{"role": "user", "content": "Say hi"}]], SamplingParams(max_new_tokens=16))
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from llm.engine import Completion, SamplingParams

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
TOKEN_PREFIX = "token_id:"


class OpenAIEngineError(RuntimeError):
    """The server refused a request, or kept failing after the retries."""


class OpenAIEngine:
    """OpenAI-compatible chat and completions client behind the `Engine` protocol."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        tokenizer: Any = None,
        token_ids: bool = True,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        version: str | None = None,
    ) -> None:
        import httpx

        if not model:
            raise ValueError("OpenAIEngine needs a model name (the one the server serves)")
        if not token_ids and tokenizer is None:
            raise ValueError("token_ids=False needs a local tokenizer to decode prompts and encode replies")
        self.model, self.tokenizer, self.token_ids = model, tokenizer, token_ids
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.version = version or f"openai:{model}"
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout_s)

    # -- text ------------------------------------------------------------------------------------

    def chat(self, conversations: Sequence[Sequence[dict]], sampling: SamplingParams) -> list[str]:
        """One assistant reply per conversation (lists of {role, content}), in order."""
        replies = []
        for messages in conversations:
            body = {"model": self.model, "messages": list(messages), **_sampling_body(sampling)}
            data = self._post("chat/completions", body)
            try:
                replies.append(data["choices"][0]["message"].get("content") or "")
            except (KeyError, IndexError, TypeError, AttributeError) as exc:
                raise OpenAIEngineError(f"chat/completions: unexpected response shape ({exc!r})") from exc
        return replies

    # -- tokens ----------------------------------------------------------------------------------

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        progress: Callable[[int], None] | None = None,
        sessions: list[Hashable] | None = None,
    ) -> list[Completion]:
        """One completion per prompt, in order, through `/completions`. `sessions` is accepted and
        ignored: servers such as vLLM reuse shared prefixes by themselves (automatic prefix caching)."""
        completions = []
        for prompt in prompts:
            if not prompt:
                raise ValueError("empty prompt")
            completions.append(self._complete(prompt, sampling))
            if progress:
                progress(1)
        return completions

    def _complete(self, prompt: list[int], sampling: SamplingParams) -> Completion:
        body: dict[str, Any] = {"model": self.model, **_sampling_body(sampling)}
        if self.token_ids:
            body |= {"prompt": prompt, "logprobs": 1, "return_tokens_as_token_ids": True}
            if sampling.stop_token_ids:
                body["stop_token_ids"] = list(sampling.stop_token_ids)
        else:
            body["prompt"] = self.tokenizer.decode(prompt, skip_special_tokens=False)
        data = self._post("completions", body)
        try:
            choice = data["choices"][0]
            text = choice.get("text") or ""
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise OpenAIEngineError(f"completions: unexpected response shape ({exc!r})") from exc
        ids, logprobs = self._ids_of(choice, text)
        return Completion(token_ids=ids, logprobs=logprobs, text=text, finish_reason=finish)

    def _ids_of(self, choice: dict, text: str) -> tuple[list[int], list[float]]:
        """Sampled ids and log-probs from `token_id:N` tokens, else the local re-encoding of `text`."""
        block = choice.get("logprobs") or {}
        tokens = block.get("tokens") or []
        if tokens and all(isinstance(t, str) and t.startswith(TOKEN_PREFIX) for t in tokens):
            ids = [int(t.removeprefix(TOKEN_PREFIX)) for t in tokens]
            logprobs = [float(lp or 0.0) for lp in block.get("token_logprobs") or [0.0] * len(ids)]
            return ids, logprobs
        if self.tokenizer is None:
            raise OpenAIEngineError(
                "the server returned no token ids (start vLLM with return_tokens_as_token_ids support) "
                "and no local tokenizer was given to encode the reply"
            )
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) or [self._end_id()]
        return ids, [0.0] * len(ids)

    def _end_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    def end_sessions(self, sessions: list[Hashable]) -> None:
        """Nothing is cached on this side."""

    def update_weights(self, source: Any) -> None:
        """Weights live in the server process; push them there (LoRA hot-load or a weight-sync endpoint)."""
        raise NotImplementedError(
            "OpenAIEngine cannot load weights itself: reload them on the server (LoRA hot-load, TRL vllm-serve)"
        )

    def close(self) -> None:
        self._client.close()

    # -- HTTP ------------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries; returns the decoded JSON object."""
        import httpx

        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self._client.post(path, json=body)
            except httpx.TransportError as exc:  # connect errors and timeouts
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code >= 400:
                raise OpenAIEngineError(f"{path}: HTTP {response.status_code}: {response.text[:500]}")
            try:
                data = response.json()
            except ValueError as exc:
                raise OpenAIEngineError(f"{path}: the server's reply is not JSON") from exc
            if not isinstance(data, dict):
                raise OpenAIEngineError(f"{path}: expected a JSON object, got {type(data).__name__}")
            return data
        raise OpenAIEngineError(f"{path}: failed after {self.max_retries + 1} attempts; last error: {last}")


def _sampling_body(sampling: SamplingParams) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": sampling.max_new_tokens}
    if sampling.greedy:
        body["temperature"] = 0.0
    else:
        body |= {"temperature": sampling.temperature, "top_p": sampling.top_p}
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body
