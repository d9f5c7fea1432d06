"""Issue 38, items 5 and 9: a key for a loopback server never goes through a proxy and a config names only
API key variables; malformed input (a manifest of the wrong shape, a name with a trailing newline, `?page=²`,
a reply nested past the recursion limit, control characters in CSV, a failed atomic write) ends in one
line or a retry, never in a traceback or a leftover file."""

from __future__ import annotations

import errno
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient
from typer.testing import CliRunner

from coevolve import run_files
from coevolve.cli import app
from coevolve.config.models import ModelConfig
from coevolve.config.teacher import OpenAITeacherConfig
from coevolve.llm.engine import SamplingParams
from coevolve.llm.openai_engine import OpenAIEngine, OpenAIEngineError
from coevolve.llm.toolcalls import parse_tool_calls
from coevolve.storage.layout import MANIFEST, RunLayout, check_run_name
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import ArtifactError, write_table, write_text_atomic
from tests.fakes.openai_server import FakeOpenAIServer

HELLO = [[{"role": "user", "content": "x"}]]


# --- item 5: keys -----------------------------------------------------------------------------------


class _Proxy:
    """A loopback socket standing in for a proxy: records whatever connects, answers nothing, closes."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def __enter__(self) -> _Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def proxy(monkeypatch):
    with _Proxy() as running:
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, running.url)
        yield running


def test_a_key_for_a_loopback_server_never_reaches_a_proxy(proxy, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-secret")
    with FakeOpenAIServer(chat_replies=["hi"]) as server:
        engine = OpenAIEngine(server.base_url, "m", tokenizer=object(), api_key_env="MY_API_KEY", max_retries=0,
                              timeout_s=2.0)  # fmt: skip
        assert engine.chat(HELLO, SamplingParams()) == ["hi"]
        engine.close()
    assert proxy.received == []
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer sk-secret"


def test_plain_http_to_another_host_with_a_key_is_refused_before_any_connection(proxy, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-secret")
    for url in ("http://10.0.0.5:8000/v1", "http://localhost.example.com/v1", "http://127.0.0.1.nip.io/v1"):
        with pytest.raises(ValueError, match="MY_API_KEY would be sent in clear text"):
            OpenAIEngine(url, "m", tokenizer=object(), api_key_env="MY_API_KEY")
    OpenAIEngine("http://127.0.0.2:8000/v1", "m", tokenizer=object(), api_key_env="MY_API_KEY")  # loopback too
    assert proxy.received == []


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HOME", "openai_api_key",
                                  "OPENAI_API_KEY\n", "_API_KEY"])  # fmt: skip
def test_a_config_names_only_api_key_variables(name):
    with pytest.raises(ValidationError, match="is not an API key variable"):
        ModelConfig(api_key_env=name)
    with pytest.raises(ValidationError, match="is not an API key variable"):
        OpenAITeacherConfig(model="m", api_key_env=name)


def test_api_key_variables_and_none_are_accepted():
    assert ModelConfig(api_key_env="VLLM_API_KEY").api_key_env == "VLLM_API_KEY"
    assert ModelConfig().api_key_env is None
    assert OpenAITeacherConfig(model="m").api_key_env == "OPENAI_API_KEY"


# --- item 9: malformed input ------------------------------------------------------------------------


class _RawServer:
    """Answers each POST with the next of `bodies` (the last one repeats), as raw text with status 200."""

    def __init__(self, bodies: list[str]) -> None:
        self.bodies, self.count = bodies, 0
        raw = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = raw.bodies[min(raw.count, len(raw.bodies) - 1)].encode()
                raw.count += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)  # fmt: skip

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> _RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


DEEP = "[" * 100_000
GOOD = json.dumps({"choices": [{"message": {"content": "fine"}}]})


def test_a_reply_nested_past_the_recursion_limit_is_a_malformed_reply_retried():
    with _RawServer([DEEP, GOOD]) as server:
        engine = OpenAIEngine(server.base_url, "m", tokenizer=object(), max_retries=1, backoff_s=0.01)
        assert engine.chat(HELLO, SamplingParams()) == ["fine"]
        assert server.count == 2
    with _RawServer([DEEP]) as server:
        engine = OpenAIEngine(server.base_url, "m", tokenizer=object(), max_retries=1, backoff_s=0.01)
        with pytest.raises(OpenAIEngineError, match="after 2 attempts.*malformed reply: JSON nested too deep"):
            engine.chat(HELLO, SamplingParams())


def test_a_malformed_reply_fails_over_to_another_server():
    with _RawServer(["not json"]) as bad, _RawServer([GOOD]) as good:
        engine = OpenAIEngine([bad.base_url, good.base_url], "m", tokenizer=object(), max_retries=2,
                              backoff_s=0.01)  # fmt: skip
        assert engine.chat(HELLO, SamplingParams()) == ["fine"]
        assert engine.healthy == [False, True] and bad.count == 1


def test_names_with_a_trailing_newline_are_refused(tmp_path):
    for name in ("demo\n", "demo\r\n"):
        with pytest.raises(ValueError, match="invalid run name"):
            check_run_name(name)
        with pytest.raises(ValueError, match="invalid run name"):
            RunLayout(tmp_path, name)
    parsed = parse_tool_calls('<tool_call>{"name": "get_weather\\n", "arguments": {}}</tool_call>')
    assert not parsed.calls and "invalid tool name" in parsed.errors[0]
    assert parse_tool_calls('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>').calls


def test_round_folders_with_non_ascii_digits_are_not_rounds(tmp_path):
    layout = RunLayout(tmp_path, "demo")
    for name in ("round=1", "round=²", "round=٣"):
        (layout.run_dir / name).mkdir(parents=True)
    assert layout.rounds() == [1]


@pytest.mark.parametrize("text", ["[]", '"x"', '{"artifacts": []}', '{"files": {"d": []}}',
                                  '{"artifacts": {"a": 5}}', '{"stage": "s", "round": "zero"}'])  # fmt: skip
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_the_file(tmp_path, text):
    path = tmp_path / MANIFEST
    path.write_text(text)
    with pytest.raises(ArtifactError, match="is not a stage manifest") as error:
        Manifest.read(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_manifest_cut_short_or_of_other_fields_still_reads_as_none(tmp_path):
    path = tmp_path / MANIFEST
    for text in ('{"stage": "s"', "[" * 100_000, '{"stage": "s", "run": "r"}'):
        path.write_text(text)
        assert Manifest.read(path) is None


def _broken_run(root: Path) -> Path:
    from coevolve.benchmarks.ui_pages import RUN, write_run

    write_run(root, steps=8, rounds=1)
    broken = RunLayout(root, RUN).manifest_path(0, "rollout")
    broken.write_text('{"artifacts": []}')
    return broken


def test_runs_and_the_web_view_name_a_manifest_of_the_wrong_shape(tmp_path):
    from coevolve.benchmarks.ui_pages import RUN
    from coevolve.ui.app import create_app

    broken = _broken_run(tmp_path)
    result = CliRunner().invoke(app, ["runs", "--root", str(tmp_path)], terminal_width=5000)
    assert result.exit_code == 2 and str(broken) in result.output and "Traceback" not in result.output
    client = TestClient(create_app(tmp_path), base_url="http://127.0.0.1", raise_server_exceptions=False)
    response = client.get(f"/runs/{RUN}/rounds/0")
    assert response.status_code == 500 and "is not a stage manifest" in response.text


def test_a_page_number_of_non_ascii_digits_is_the_first_page(tmp_path):
    from coevolve.benchmarks.ui_pages import RUN, write_run
    from coevolve.ui.app import create_app

    write_run(tmp_path, steps=8, rounds=1)
    client = TestClient(create_app(tmp_path), base_url="http://127.0.0.1", raise_server_exceptions=False)
    for page in ("²", "٣", "9" * 30):
        for url in (f"/runs/{RUN}/rounds/0", f"/runs/{RUN}/tasks", f"/runs/{RUN}/signals"):
            response = client.get(url, params={"page": page})
            assert response.status_code == 200, (url, page, response.text[:300])


def test_sql_csv_prints_control_characters_escaped(tmp_path):
    query = "SELECT chr(27) || '[31mred' || chr(27) || '[0m' AS \"v\", 'a' || chr(10) || 'b' AS w"
    result = CliRunner().invoke(app, ["sql", query, "--format", "csv", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\\x1b[31mred\\x1b[0m" in result.output
    assert '"a\nb"' in result.output  # a newline is CSV's to quote


def _disk_full(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_an_atomic_write_that_fails_leaves_no_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(run_files.os, "fsync", _disk_full)
    with pytest.raises(run_files.DiskFullError, match="No space left on the device holding .*config.yaml"):
        write_text_atomic("run: {}\n", tmp_path / "config.yaml")
    with pytest.raises(run_files.DiskFullError, match="No space left on the device holding .*t.parquet"):
        write_table(pa.table({"a": [1]}), tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []
