"""`OpenAIEngine`: a model behind an OpenAI-compatible HTTP server (vLLM, SGLang, a hosted API).

Two paths, both over httpx with timeouts and retries (connection errors, timeouts, 429 and 5xx, replies
that are not a JSON object, with exponential backoff; other 4xx fail at once with the server's message):

- `chat(conversations, sampling)`: text in, text out through `/chat/completions`. The teacher uses it to
  reflect on trajectories and to abstract tasks.
- `generate(prompts, sampling)`: the `Engine` contract (token ids in, `Completion`s out) through
  `/completions`. With `token_ids=True` the prompt goes as token ids and the server is asked for
  `logprobs` with `return_tokens_as_token_ids` (vLLM), so the completion keeps the exact sampled ids and
  their log-probs, as rollouts need. With `token_ids=False` (a server whose tokenizer differs from the
  local one) the prompt is decoded to text by the local `tokenizer` and the reply re-encoded with it;
  log-probs are then zeros, good for exploration episodes, never for training.

The episode loop drives each episode on its own against this engine (`independent_requests`): an episode's
next request goes out as soon as its reply is stepped, so vLLM's continuous batching keeps every live
episode in its batch instead of waiting, turn after turn, for the turn's slowest reply.

Several servers (`base_url` a list) are used round-robin; a server that fails a request (connection
error, timeout, retryable status) is set aside and the request goes to the next one; set-aside servers are
probed again (`GET /models`) at the start of every `generate` call. Prompts of one call are sent
concurrently (`max_concurrency` in flight), so the servers batch them.

With token ids, each prompt of a call is sent with its own seed (the call's seed plus its index), so the
K samples of a group differ while a seeded call stays reproducible, and the reply's text is decoded
locally from the sampled ids, as the in-process engine decodes it.

A bearer key (`api_key_env`) goes only over https or to a loopback server, and the client of a loopback
server ignores the proxy settings of the environment (`HTTP_PROXY`, ...; `coevolve.loopback`), so its
requests never leave the machine.

A served *policy* gets new weights after every update (`update_weights(directory, version=...)`): a LoRA
adapter is loaded on every server under a fresh name (`POST /load_lora_adapter`, vLLM with
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), requests then name that adapter as their model, and the previous
adapter is unloaded; a full checkpoint is loaded into the servers' base weights in place
(`llm.served_weights`, servers started by `coevolve engine serve`). The directory must be readable by the
servers (same machine or a shared file system). Every `Completion` carries the engine's `version` at the
time of the request.

    engine = OpenAIEngine("http://127.0.0.1:8000/v1", "Qwen/Qwen3-4B", tokenizer=tok, token_ids=True)
    engine.chat([[{"role": "user", "content": "Say hi"}]], SamplingParams(max_new_tokens=16))
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from coevolve.llm.engine import Completion, OpenAIEngineError, SamplingParams
from coevolve.loopback import http_client, is_loopback

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""Largest reply read from a server (a completion of thousands of tokens with log-probs is far smaller)."""
TOKEN_PREFIX = "token_id:"


class OpenAIEngine:
    """OpenAI-compatible chat and completions client behind the `Engine` protocol."""

    independent_requests = True
    """Requests are served one by one as they come (a server batches them continuously), so the episode loop
    sends each episode's next request as soon as its own reply is in (`agents.episodes.run_episodes`)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        api_key_env: str | None = None,
        tokenizer: Any = None,
        token_ids: bool = True,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        version: str | None = None,
        max_concurrency: int = 32,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        if not model:
            raise ValueError("OpenAIEngine needs a model name (the one the server serves)")
        if not token_ids and tokenizer is None:
            raise ValueError("token_ids=False needs a local tokenizer to decode prompts and encode replies")
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("OpenAIEngine needs at least one server URL")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.base_model = self.model = model
        """`base_model`: what the servers serve; `model`: what requests name (the base or the live adapter)."""
        self.tokenizer, self.token_ids = tokenizer, token_ids
        self.max_retries, self.backoff_s, self.max_concurrency = max_retries, backoff_s, max_concurrency
        self.max_response_bytes = max_response_bytes
        self.version = version or f"openai:{model}"
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env) if api_key_env else None
        if key:
            exposed = [url for url in urls if not _safe_for_keys(url)]
            if exposed:
                raise ValueError(f"{api_key_env} would be sent in clear text to {exposed[0]}: use https, or a "
                                 f"loopback address, for a server that needs a key")  # fmt: skip
            headers["Authorization"] = f"Bearer {key}"
        self.urls = [url.rstrip("/") for url in urls]
        self._clients = [http_client(url + "/", headers=headers, timeout=timeout_s) for url in self.urls]
        self.healthy = [True] * len(urls)
        """Per server: False once it failed a request, until a health probe succeeds."""
        self._turn = itertools.count()
        self._adapters = itertools.count()
        self._lock = threading.Lock()

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
        """One completion per prompt, in order, through `/completions` (up to `max_concurrency` requests
        in flight). `sessions` is accepted and ignored: servers such as vLLM reuse shared prefixes by
        themselves (automatic prefix caching)."""
        if any(not prompt for prompt in prompts):
            raise ValueError("empty prompt")
        self.check_health()
        completions: list[Completion | None] = [None] * len(prompts)
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(prompts)))) as pool:
            futures = {pool.submit(self._complete, prompt, sampling, i): i for i, prompt in enumerate(prompts)}
            for future in as_completed(futures):
                completions[futures[future]] = future.result()
                if progress:
                    progress(1)
        return [c for c in completions if c is not None]

    def _complete(self, prompt: list[int], sampling: SamplingParams, index: int = 0) -> Completion:
        body: dict[str, Any] = {"model": self.model, **_sampling_body(sampling)}
        if self.token_ids:
            body |= {"prompt": prompt, "logprobs": 1, "return_tokens_as_token_ids": True}
            if sampling.seed is not None:  # one seed for all would give the K samples of a group one reply
                body["seed"] = (sampling.seed + index) % 2**32
            stop = {*sampling.stop_token_ids, *self._eos_ids()}
            if stop:
                body["stop_token_ids"] = sorted(stop)
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
        if self.token_ids and self.tokenizer is not None:  # the reply without its stop token, specials kept
            text = self.tokenizer.decode(ids[:-1] if finish == "stop" else ids, skip_special_tokens=False)
        return Completion(token_ids=ids, logprobs=logprobs, text=text, finish_reason=finish, version=self.version)

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

    def _eos_ids(self) -> list[int]:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return [int(eos)] if isinstance(eos, int) else []

    def end_sessions(self, sessions: list[Hashable]) -> None:
        """Nothing is cached on this side."""

    def update_weights(self, source: Any, *, version: str | None = None) -> None:
        """Serve the weights in directory `source` on every server: a LoRA adapter is hot-loaded under a
        fresh name (the previous one dropped), a full checkpoint loaded in place (`llm.served_weights`).
        `version` (else left to the caller) becomes the engine's version and the servers' weight label."""
        from coevolve.llm.served_weights import is_full_checkpoint, sync_full_weights

        path = Path(source) if isinstance(source, str | os.PathLike) else None
        if path is not None and is_full_checkpoint(path):
            sync_full_weights(self, path, version or self.version, force=version is None)
            self.use_base()
        elif path is not None and (path / "adapter_config.json").is_file():
            name = f"policy-{next(self._adapters)}-{os.getpid()}"
            for server in range(len(self._clients)):
                self._post_to(server, "load_lora_adapter", {"lora_name": name, "lora_path": str(path.resolve())})
            previous, self.model = self.model, name
            if previous != self.base_model:
                self._unload(previous)
        else:
            raise OpenAIEngineError(
                f"update_weights: {source!r} is neither a LoRA adapter directory (adapter_config.json) nor a "
                "checkpoint directory (config.json and safetensors)"
            )
        if version is not None:
            self.version = version

    def use_base(self, weights: Path | None = None, *, version: str | None = None) -> None:
        """Serve the base model again (the policy went back to its initial weights); `version` names them.
        `weights`: the base checkpoint directory of a full-weight policy, loaded on every server whose
        weight label is not `version` (a server synced by an earlier run serves other weights)."""
        previous, self.model = self.model, self.base_model
        if previous != self.base_model:
            self._unload(previous)
        if weights is not None:
            from coevolve.llm.served_weights import sync_full_weights

            sync_full_weights(self, weights, version or self.version)
        if version is not None:
            self.version = version

    def _unload(self, name: str) -> None:
        for server in range(len(self._clients)):
            self._post_to(server, "unload_lora_adapter", {"lora_name": name})

    def check_health(self) -> list[bool]:
        """Probe the set-aside servers (`GET /models`); raise if none is usable."""
        import httpx

        for server, ok in enumerate(self.healthy):
            if not ok:
                with contextlib.suppress(httpx.TransportError):
                    self.healthy[server] = self._clients[server].get("models").status_code == 200
        if not any(self.healthy):
            raise OpenAIEngineError(f"no inference server answers: {', '.join(self.urls)}")
        return list(self.healthy)

    def close(self) -> None:
        for client in self._clients:
            client.close()

    # -- HTTP ------------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to the next healthy server, moving on to the others when one fails; the decoded JSON."""
        status, reply = self._request(path, body, decode=True)
        if status >= 400:
            raise OpenAIEngineError(f"{path}: HTTP {status}: {reply[:500]}")
        return reply

    def _post_to(self, server: int, path: str, body: dict[str, Any]) -> str:
        """POST to one given server (adapter management must reach every server); the reply's text."""
        status, text = self._request(path, body, server=server)
        if status >= 400:
            raise OpenAIEngineError(f"{self.urls[server]}/{path}: HTTP {status}: {text[:500]}")
        return text

    def _request(
        self, path: str, body: dict[str, Any], *, server: int | None = None, decode: bool = False
    ) -> tuple[int, Any]:
        """(status, text) of a POST, retried with backoff on failures worth retrying. Without `server`, each
        attempt goes to the next healthy server and, with several, a failing one is set aside. With
        `decode`, a successful reply's text is decoded to its JSON object, and a malformed reply (not JSON,
        nested past the parser's recursion limit, not an object) is a failure worth retrying."""
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            target = server if server is not None else self._pick()
            if target is None:
                break
            status, text, error = self._send(target, path, body)
            if error is None and decode and status < 400:
                text, error = _decode(text)
            if error is None:
                return status, text
            last = f"{self.urls[target]}: {error}"
            if server is None and len(self._clients) > 1:
                self.healthy[target] = False
        raise OpenAIEngineError(f"{path}: failed after {self.max_retries + 1} attempts; last error: {last}")

    def _pick(self) -> int | None:
        with self._lock:
            usable = [i for i, ok in enumerate(self.healthy) if ok]
            return usable[next(self._turn) % len(usable)] if usable else None

    def _send(self, server: int, path: str, body: dict[str, Any]) -> tuple[int, str, str | None]:
        """(status, text, None), or (0, "", error) for a failure worth retrying."""
        import httpx

        try:
            with self._clients[server].stream("POST", path, json=body) as response:
                text = _read_capped(response, self.max_response_bytes, f"{self.urls[server]}/{path}")
        except httpx.TransportError as exc:  # connect errors and timeouts
            return 0, "", f"{type(exc).__name__}: {exc}"
        if response.status_code in RETRY_STATUS:
            return 0, "", f"HTTP {response.status_code}: {text[:200]}"
        return response.status_code, text, None


def _decode(text: str) -> tuple[Any, str | None]:
    """(the JSON object of a reply, None), or (None, why it is malformed)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None, "malformed reply: not JSON"
    except RecursionError:  # brackets nested past the interpreter's recursion limit
        return None, "malformed reply: JSON nested too deep to parse"
    if not isinstance(data, dict):
        return None, f"malformed reply: expected a JSON object, got {type(data).__name__}"
    return data, None


def _read_capped(response: Any, limit: int, where: str) -> str:
    """The body of a streamed response, refusing one over `limit` bytes before reading it whole."""
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limit:
            raise OpenAIEngineError(f"{where}: the reply is larger than {limit} bytes; refused")
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _safe_for_keys(url: str) -> bool:
    """https, or plain http to this machine: where a bearer key may go."""
    from urllib.parse import urlparse

    return urlparse(url).scheme == "https" or is_loopback(url)


def _sampling_body(sampling: SamplingParams) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": sampling.max_new_tokens}
    if sampling.greedy:
        body["temperature"] = 0.0
    else:
        body |= {"temperature": sampling.temperature, "top_p": sampling.top_p}
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body
