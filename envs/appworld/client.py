"""A small JSON-over-HTTP client for `appworld serve environment`, with errors that say how to fix them.

AppWorld runs in its own venv (its pins clash with ours) as an HTTP server on loopback; this module is the
only place that talks to it. Every request has a timeout, and every failure (nothing listening, a
timeout, a non-200 answer, a body that is not JSON) raises `AppWorldError` naming the URL and the fix.
The server wraps every answer as `{"output": ...}`; `post`/`get` return that `output`.

Stdlib only (`urllib`), with proxies disabled: a loopback server must never be reached through a proxy
set in the environment.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
APPWORLD_VENV = ".venv-appworld"
SETUP_COMMAND = (
    f"python3 -m venv {APPWORLD_VENV} && {APPWORLD_VENV}/bin/pip install appworld"
    f" && {APPWORLD_VENV}/bin/appworld install && {APPWORLD_VENV}/bin/appworld download data"
)
"""Creates AppWorld's own venv, decrypts its apps (offline) and downloads the task data (needs internet)."""
_MAX_DETAIL = 300
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""Largest answer read from the server (an API call's output, a task's data); a bigger one is refused."""


class AppWorldError(RuntimeError):
    """The AppWorld server could not be used; the message names the URL and what to do.

    `reason` is the short cause alone (e.g. "connection refused"), for reports that print the fix apart."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def serve_command(port: int) -> str:
    """The command that starts the server; run it in the folder that holds AppWorld's `data/`."""
    return f"{APPWORLD_VENV}/bin/appworld serve environment --port {port}"


def port_of(base_url: str) -> int:
    parts = urllib.parse.urlsplit(base_url)
    return parts.port or (443 if parts.scheme == "https" else 80)


class AppWorldClient:
    """POST/GET JSON to one AppWorld environment server; `timeout` seconds per request."""

    def __init__(self, base_url: str = DEFAULT_URL, timeout: float = 60,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:  # fmt: skip
        if timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"base_url must look like {DEFAULT_URL}, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(self, path: str, payload: dict[str, Any]) -> Any:
        return self.request("POST", path, payload).get("output")

    def get(self, path: str) -> Any:
        return self.request("GET", path).get("output")

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """The decoded JSON object the server answered; raises `AppWorldError` on any failure."""
        url = self.base_url + path
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as response:
                body = response.read(self.max_response_bytes + 1)
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code}: {_detail(exc)}"
            raise AppWorldError(self._status_message(url, reason), reason) from None
        except OSError as exc:  # URLError (refused, unknown host), timeouts, resets mid-answer
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                reason = f"no answer within {self.timeout:g} s"
                raise AppWorldError(self._timeout_message(url), reason) from exc
            raise AppWorldError(self._unreachable_message(url, reason), str(reason)) from exc
        if len(body) > self.max_response_bytes:
            raise AppWorldError(f"AppWorld server at {url} answered more than {self.max_response_bytes} bytes; "
                                "refused (is it really `appworld serve environment`?)", "answer too large")
        return _decoded(url, body, self.base_url)

    # -- messages ----------------------------------------------------------------------------------

    def start_hint(self) -> str:
        return (
            f"start it in the AppWorld venv, from the folder holding AppWorld's data/: "
            f"`{serve_command(port_of(self.base_url))}` (set the venv up once with `{SETUP_COMMAND}`)"
        )

    def _unreachable_message(self, url: str, reason: object) -> str:
        return f"AppWorld server not reachable at {url} ({reason}); {self.start_hint()}"

    def _timeout_message(self, url: str) -> str:
        return (
            f"AppWorld server at {url} did not answer within {self.timeout:g} s; it may be stuck on a "
            f"long execution: restart it (`{serve_command(port_of(self.base_url))}`) or raise the "
            f"env option `timeout`"
        )

    def _status_message(self, url: str, reason: str) -> str:
        message = f"AppWorld server at {url} answered {reason}"
        if "active task world" in reason:
            return message + (
                " (one AppWorld server holds one world at a time: give every concurrent episode its "
                "own server and base_url)"
            )
        if "/tasks/" in url or url.endswith("/initialize"):
            return message + (
                " (is the task id right and the data downloaded? `appworld download data`, then restart "
                "the server in that folder)"
            )
        return message + " (the server's console shows the traceback)"


def _decoded(url: str, body: bytes, base_url: str) -> dict[str, Any]:
    try:
        decoded = json.loads(body)
    except ValueError:
        raise AppWorldError(
            f"AppWorld server at {url} answered with something that is not JSON "
            f"({body[:80]!r}); is {base_url} really `appworld serve environment`?"
        ) from None
    if not isinstance(decoded, dict):
        raise AppWorldError(f"AppWorld server at {url} answered {type(decoded).__name__}, not an object")
    return decoded


def _detail(exc: urllib.error.HTTPError) -> str:
    """FastAPI's `{"detail": ...}` of an error answer, else the start of its body."""
    try:
        body = exc.read(_MAX_DETAIL * 4)
    except OSError:
        return exc.reason if isinstance(exc.reason, str) else "no body"
    try:
        detail = json.loads(body).get("detail", body.decode(errors="replace"))
    except (ValueError, AttributeError):
        detail = body.decode(errors="replace")
    text = detail if isinstance(detail, str) else json.dumps(detail)
    return text[:_MAX_DETAIL] or "empty body"
