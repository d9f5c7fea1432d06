"""A small OpenAI-compatible HTTP server on a free loopback port, for testing `llm.openai_engine`.

    with FakeOpenAIServer(chat_replies=["hello"]) as server:
        engine = OpenAIEngine(server.base_url, "fake-model")

`/v1/chat/completions` answers with the next of `chat_replies` (cycling); `/v1/completions` answers
each token-id prompt with `completion_ids` (as `token_id:N` tokens when `return_tokens_as_token_ids` is
asked, like vLLM) and a text prompt with `completion_text`. `fail_first` makes the first N requests
answer 503; `delay_s` sleeps before answering (timeouts). Every request body and its headers are kept
in `requests`. This is a fake: it samples nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
    ) -> None:
        self.chat_replies, self.completion_ids = list(chat_replies), list(completion_ids)
        self.completion_text, self.fail_first, self.delay_s = completion_text, fail_first, delay_s
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

    def _answer(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
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
            return 200, {"choices": [self._completion_choice(body)]}
        return 404, {"error": {"message": f"no route {path}"}}

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
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

        return Handler
