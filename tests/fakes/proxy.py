"""`RecordingProxy`: a company proxy that cannot reach this machine's loopback, on a free loopback port.

It records the request line of everything sent to it (a proxied `GET http://127.0.0.1:4200/api/health`,
a `CONNECT host:443` tunnel) and answers every one `502 Bad Gateway`, as a real proxy does for a loopback
address it cannot reach. `environment()` is what a shell behind it sets: HTTP(S)_PROXY and ALL_PROXY in
both spellings, and no NO_PROXY.

    with RecordingProxy() as proxy:
        ...                           # with proxy.environment() in os.environ
        assert proxy.requests == []
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")


class RecordingProxy:
    """Answers 502 to everything; `requests` holds each request line ("GET http://... HTTP/1.1")."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def refuse(self) -> None:
                proxy.requests.append(self.requestline)
                body = b"502 Bad Gateway: this proxy cannot reach the address\n"
                self.send_response(502)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_CONNECT = refuse

            def log_message(self, *args: object) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def environment(self) -> dict[str, str]:
        """The proxy variables pointing here (NO_PROXY is left for the caller to remove)."""
        return dict.fromkeys(PROXY_VARIABLES, self.url)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
