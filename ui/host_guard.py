"""The web view answers only requests addressed to a name it is served under, and is never framed.

A page on any web site can make the user's browser send requests to `http://127.0.0.1:8420` through DNS
rebinding: its own name (`evil.example.com`) is re-pointed to 127.0.0.1, the browser sees the same origin
and lets the page read the answers. Such a request still names the attacker's host in its Host header, so
`HostGuard` refuses (400, one plain line) every Host but:

- the loopback names, `127.0.0.1`, `localhost`, `[::1]` (any 127.0.0.0/8 address), with any port;
- the host the view was started with (`coevolve ui --host NAME`), when that is another interface or name;
- for a wildcard address (`--host 0.0.0.0` or `::`), this machine's own names and any IP address typed as
  such (an address in the Host header is what the user typed; rebinding needs a name).

Every response, a refusal or an error included, also carries `X-Frame-Options: DENY`,
`Content-Security-Policy: frame-ancestors 'none'` (no other site can frame the view and steer clicks) and
`X-Content-Type-Options: nosniff` (a stored file is never run as a script or a page it does not declare).

    app = HostGuard(starlette_app, served_on="127.0.0.1")
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from coevolve.loopback import is_loopback_host

SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
)
WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", ""})


def host_name(host_header: str) -> str:
    """The host of a Host header value, without its port or IPv6 brackets, lower case, no trailing dot."""
    value = host_header.strip().lower()
    if value.startswith("["):
        value = value[1:].partition("]")[0]
    elif value.count(":") == 1:
        value = value.partition(":")[0]
    return value.rstrip(".")


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostGuard:
    """ASGI middleware: the Host check and the security headers, around the whole view."""

    def __init__(self, app: Any, served_on: str = "127.0.0.1") -> None:
        self.app = app
        served = host_name(served_on)
        self.wildcard = served in WILDCARD_ADDRESSES
        self.names = {served} if served else set()
        if self.wildcard:
            self.names |= {host_name(socket.gethostname()), host_name(socket.getfqdn())}

    def accepts(self, host_header: str) -> bool:
        host = host_name(host_header)
        if not host:
            return False
        return is_loopback_host(host) or host in self.names or (self.wildcard and _is_ip_address(host))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        host = next((value.decode("latin-1") for key, value in scope["headers"] if key == b"host"), "")
        if self.accepts(host):
            return await self.app(scope, receive, send_with_headers)
        await _refuse(host, send_with_headers)


async def _refuse(host: str, send: Any) -> None:
    body = (f"400 Bad Request: this view does not answer to Host {host[:100]!r}; open it at "
            f"http://127.0.0.1:PORT/ (or the --host it was started with)\n").encode()  # fmt: skip
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
