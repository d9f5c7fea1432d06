"""Servers on this machine are reached directly, never through the proxy the environment names.

The temporary Prefect server, vLLM servers, a local teacher: every one listens on loopback. A proxy set in
the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, as most company networks set) cannot reach
this machine's loopback, so a client that honours it gets a 502 or a timeout, and a bearer key sent that
way leaves the machine. Three ways in, one decision (`is_loopback`):

- `http_client(url)`: the httpx client for a URL; it ignores the environment's proxies when the URL is on
  loopback, and honours them otherwise (a hosted API behind the company proxy still works).
- `direct_loopback()`: for a block, `NO_PROXY`/`no_proxy` also name the loopback hosts, for clients this
  code does not build (Prefect's own client) and for every child process started in the block.
- `is_loopback_host(host)`: the same decision for a bare host name (the web view's Host check).

    with http_client("http://127.0.0.1:4200/api") as client:
        client.get("health")
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
"""The names `direct_loopback` adds to NO_PROXY: what this project's servers bind and its URLs name."""
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")


def is_loopback_host(host: str) -> bool:
    """`localhost` (or a name under `.localhost`), 127.0.0.0/8 or ::1, with or without IPv6 brackets."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback(url: str) -> bool:
    """Whether a URL names a server on this machine."""
    try:
        host = urlsplit(url).hostname
    except ValueError:  # a malformed netloc ('http://[::1')
        return False
    return bool(host) and is_loopback_host(host)


def http_client(url: str, **options: Any) -> Any:
    """An `httpx.Client` for requests to `url` (passed on as its `base_url`); on loopback it ignores the
    environment's proxy settings. `options` go to httpx (timeout, headers, ...)."""
    import httpx

    return httpx.Client(base_url=url, trust_env=not is_loopback(url), **options)


def with_loopback(no_proxy: str) -> str:
    """A NO_PROXY value that also names every loopback host, the hosts it named first and in order."""
    named = [host.strip() for host in no_proxy.split(",") if host.strip()]
    return ",".join(dict.fromkeys(named + list(LOOPBACK_HOSTS)))


@contextlib.contextmanager
def direct_loopback() -> Iterator[None]:
    """NO_PROXY and no_proxy name the loopback hosts for the block (this process, and the child processes
    it starts), then are as they were. Both spellings get the union: urllib lets the lower-case one win,
    httpx and curl read either."""
    before = {name: os.environ.get(name) for name in NO_PROXY_VARIABLES}
    value = with_loopback(",".join(v for v in before.values() if v))
    os.environ.update(dict.fromkeys(NO_PROXY_VARIABLES, value))
    try:
        yield
    finally:
        for name, old in before.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
