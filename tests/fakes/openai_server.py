"""A small OpenAI-compatible HTTP server on a free loopback port, for testing `llm.openai_engine`.

    with FakeOpenAIServer(chat_replies=["hello"]) as server:
        engine = OpenAIEngine(server.base_url, "fake-model")

`/v1/chat/completions` answers with the next of `chat_replies` (cycling); `/v1/completions` answers
each token-id prompt with `completion_ids` (as `token_id:N` tokens when `return_tokens_as_token_ids` is
asked, like vLLM) and a text prompt with `completion_text`. `fail_first` makes the first N requests
answer 503; `delay_s` sleeps before answering (timeouts). Every request body and its headers are kept
in `requests`. This is a fake: it samples nothing.

Like vLLM with runtime LoRA updating, it also answers `GET /v1/models`, `POST /v1/load_lora_adapter`
({lora_name, lora_path}) and `POST /v1/unload_lora_adapter` ({lora_name}) with plain-text replies, keeps
the loaded adapters in `adapters` (name -> path), and refuses a completion whose `model` is neither
`served_model` nor a loaded adapter (404). Each completion echoes the model it was asked for.

With `dev_endpoints`, it also answers what a vLLM server started for a full-weight policy adds (dev mode
and the `coevolve_vllm` worker extension): `/pause`, `/resume`, `/reset_prefix_cache`,
`/update_weight_version` ({new_version}, read back by `GET /weight_info`) and `/collective_rpc` with
`reload_from_dir` (the directory is appended to `reloads`); without it those paths answer 404.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEV_PATHS = frozenset({"/pause", "/resume", "/reset_prefix_cache", "/update_weight_version", "/collective_rpc"})


class FakeOpenAIServer:
    """Context manager running the fake server in a daemon thread."""

    def __init__(
        self,
        *,
        chat_replies: Sequence[str] = ("ok",),
        completion_ids: Sequence[int] = (42, 43, 2),
        completion_text: str = "fake reply",
        fail_first: int = 0,
        delay_s: float = 0.0,
        served_model: str | None = None,
        dev_endpoints: bool = False,
    ) -> None:
        self.chat_replies, self.completion_ids = list(chat_replies), list(completion_ids)
        self.completion_text, self.fail_first, self.delay_s = completion_text, fail_first, delay_s
        self.served_model = served_model
        """When set, completions must name it or a loaded adapter."""
        self.adapters: dict[str, str] = {}
        self.dev_endpoints = dev_endpoints
        self.weight_version = "default"
        self.reloads: list[str] = []
        self.paused = False
        self.requests: list[dict[str, Any]] = []
        self._chats = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _answer(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        with self._lock:
            self.requests.append({"path": path, "body": body, "headers": headers})
            index = len(self.requests) - 1
        if index < self.fail_first:
            return 503, {"error": {"message": "overloaded"}}
        if path == "/v1/chat/completions":
            with self._lock:
                reply = self.chat_replies[self._chats % len(self.chat_replies)]
                self._chats += 1
            return 200, {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                ]
            }
        if path == "/v1/completions":
            model = body.get("model")
            if self.served_model is not None and model != self.served_model and model not in self.adapters:
                return 404, {"error": {"message": f"The model `{model}` does not exist."}}
            return 200, {"model": model, "choices": [self._completion_choice(body)]}
        if path == "/v1/load_lora_adapter":
            with self._lock:
                if body.get("lora_name") in self.adapters:
                    return 400, {"error": {"message": f"adapter {body.get('lora_name')} is already loaded"}}
                self.adapters[body["lora_name"]] = body["lora_path"]
            return 200, f"Success: LoRA adapter '{body['lora_name']}' added successfully."
        if path == "/v1/unload_lora_adapter":
            with self._lock:
                if self.adapters.pop(body.get("lora_name"), None) is None:
                    return 404, {"error": {"message": f"adapter {body.get('lora_name')} not found"}}
            return 200, f"Success: LoRA adapter '{body['lora_name']}' removed successfully."
        if self.dev_endpoints and path.split("?")[0] in DEV_PATHS:
            return self._dev(path.split("?")[0], body)
        return 404, {"error": {"message": f"no route {path}"}}

    def _dev(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            if path in ("/pause", "/resume"):
                self.paused = path == "/pause"
                return 200, {"status": "paused" if self.paused else "resumed"}
            if path == "/update_weight_version":
                self.weight_version = body["new_version"]
                return 200, {"success": True, "new_version": self.weight_version}
            if path == "/collective_rpc":
                if body.get("method") != "reload_from_dir" or not self.paused:
                    return 400, {"error": f"unexpected rpc {body} (paused: {self.paused})"}
                self.reloads.append(body["args"][0])
                return 200, {"results": [{"path": body["args"][0], "tied": True}]}
            return 200, {"success": True}  # /reset_prefix_cache

    def _completion_choice(self, body: dict[str, Any]) -> dict[str, Any]:
        max_tokens = int(body.get("max_tokens", 16))
        ids = self.completion_ids[:max_tokens]
        finish = "length" if len(self.completion_ids) > max_tokens else "stop"
        choice: dict[str, Any] = {"index": 0, "text": self.completion_text, "finish_reason": finish}
        if body.get("logprobs") and body.get("return_tokens_as_token_ids"):
            choice["logprobs"] = {
                "tokens": [f"token_id:{i}" for i in ids],
                "token_logprobs": [-0.5] * len(ids),
            }
        return choice

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                status, payload = fake._answer(self.path, body, dict(self.headers))
                self._reply(status, payload)

            def do_GET(self) -> None:  # noqa: N802
                with fake._lock:
                    fake.requests.append({"path": self.path, "body": None, "headers": dict(self.headers)})
                if self.path == "/weight_info" and fake.dev_endpoints:
                    self._reply(200, {"weight_version": fake.weight_version})
                elif self.path == "/v1/models":
                    names = [fake.served_model or "fake-model", *fake.adapters]
                    self._reply(200, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]})
                else:
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})

            def _reply(self, status: int, payload: Any) -> None:
                text = isinstance(payload, str)
                data = payload.encode() if text else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        return Handler
