"""Behind a company proxy (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY set, no NO_PROXY), every request to a server
on this machine goes to it directly: the Prefect health check, the vLLM readiness wait, the OpenAI-compatible
engine, and anything run inside `direct_loopback` (Prefect's own client, child processes); a server
elsewhere is still reached through the proxy. The proxy is `tests.fakes.proxy.RecordingProxy`, which answers
502 to everything and records what it was sent. The real run behind it: tests/integration/test_faults_proxy.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from coevolve.flows.prefect_api import healthy, prefect_api
from coevolve.llm.engine import SamplingParams
from coevolve.llm.openai_engine import OpenAIEngine
from coevolve.llm.vllm_server import wait_until_ready
from coevolve.loopback import direct_loopback, http_client, is_loopback, is_loopback_host, with_loopback
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.proxy import NO_PROXY_VARIABLES, RecordingProxy


class LocalServer:
    """Answers every GET with 200 and `{"data": []}` (a Prefect /health, a vLLM /models); counts them."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                body = json.dumps({"data": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LocalServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(monkeypatch):
    """A shell behind a proxy that cannot reach loopback: the proxy variables set, NO_PROXY unset."""
    with RecordingProxy() as running:
        for name in NO_PROXY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in running.environment().items():
            monkeypatch.setenv(name, value)
        yield running


@pytest.fixture
def server():
    with LocalServer() as running:
        yield running


def test_premise_a_client_that_honours_the_environment_sends_loopback_requests_to_the_proxy(proxy, server):
    assert httpx.get(f"http://127.0.0.1:{server.port}/health").status_code == 502
    assert proxy.requests == [f"GET http://127.0.0.1:{server.port}/health HTTP/1.1"]
    assert server.hits == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_prefect_health_check_reaches_a_loopback_server_directly(proxy, server, host):
    assert healthy(f"http://{host}:{server.port}/api")
    assert proxy.requests == []
    assert server.hits == ["/api/health"]


def test_the_vllm_readiness_wait_reaches_a_loopback_server_directly(proxy, server):
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert wait_until_ready(f"http://127.0.0.1:{server.port}/v1", process, timeout_s=8) < 5
    finally:
        process.kill()
        process.wait()
    assert proxy.requests == []
    assert server.hits == ["/v1/models"]


def test_the_openai_engine_reaches_a_server_named_localhost_directly(proxy):
    with FakeOpenAIServer(chat_replies=["hi"]) as fake:
        engine = OpenAIEngine(fake.base_url.replace("127.0.0.1", "localhost"), "m", tokenizer=object(),
                              max_retries=0, timeout_s=5.0)  # fmt: skip
        assert engine.chat([[{"role": "user", "content": "hello"}]], SamplingParams()) == ["hi"]
        engine.close()
    assert proxy.requests == []


def test_a_server_elsewhere_is_still_reached_through_the_proxy(proxy):
    with http_client("http://models.example.com/v1", timeout=5) as client:
        assert client.get("models").status_code == 502
    assert proxy.requests == ["GET http://models.example.com/v1/models HTTP/1.1"]


def test_inside_direct_loopback_every_client_and_child_process_goes_direct_and_no_proxy_is_restored(
    proxy, server, monkeypatch
):
    monkeypatch.setenv("NO_PROXY", "corp.example.com")
    url = f"http://127.0.0.1:{server.port}/x"
    child = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).status)"
    with direct_loopback():
        assert httpx.get(url).status_code == 200  # a client built with the environment's settings (Prefect's)
        assert urllib.request.urlopen(url, timeout=5).status == 200
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == "200", done.stderr[-1000:]
        assert os.environ["no_proxy"] == "corp.example.com,localhost,127.0.0.1,::1"
    assert proxy.requests == []
    assert len(server.hits) == 3
    assert os.environ["NO_PROXY"] == "corp.example.com"
    assert "no_proxy" not in os.environ


def test_a_configured_loopback_prefect_api_is_checked_and_used_directly(proxy, server, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{server.port}/api")
    with prefect_api() as url:
        assert httpx.get(url + "/flows").status_code == 200  # what Prefect's client does inside the block
    assert proxy.requests == []
    assert server.hits == ["/api/health", "/api/flows"]


@pytest.mark.parametrize(
    ("url", "expected"),
    [("http://127.0.0.1:4200/api", True), ("http://127.3.0.9/", True), ("http://localhost:8000/v1", True),
     ("http://[::1]:8000/v1", True), ("https://LOCALHOST./v1", True), ("http://10.0.0.5:8000", False),
     ("http://localhost.example.com/v1", False), ("http://127.0.0.1.nip.io/v1", False), ("http://[::1", False),
     ("not a url", False)],
)  # fmt: skip
def test_is_loopback(url, expected):
    assert is_loopback(url) is expected


def test_is_loopback_host_takes_bare_and_bracketed_names():
    assert is_loopback_host("[::1]") and is_loopback_host("localhost") and is_loopback_host("127.0.0.1")
    assert not is_loopback_host("evil.example.com") and not is_loopback_host("0.0.0.0")


def test_with_loopback_keeps_what_no_proxy_named_once():
    assert with_loopback("") == "localhost,127.0.0.1,::1"
    assert with_loopback("a.example, localhost,a.example") == "a.example,localhost,127.0.0.1,::1"


def test_coevolve_serve_polls_a_loopback_prefect_server_directly(proxy, monkeypatch):
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.serve import serve_deployment

    seen = {}
    monkeypatch.setattr(coevolve, "serve", lambda **_: seen.update(no_proxy=os.environ.get("no_proxy")))
    serve_deployment()
    assert seen["no_proxy"] == "localhost,127.0.0.1,::1"  # Prefect's runner client reads it
    assert "no_proxy" not in os.environ
