"""The Prefect API a command talks to: the configured server, or a temporary one that dies with the process.

`coevolve run` and `coevolve stage` need a Prefect API. With PREFECT_API_URL set (or a profile naming a
server) that server is used, after a health check. Without one, a temporary local server is started:
Prefect's own server app under uvicorn on a free loopback port, with its state in PREFECT_HOME like
Prefect's ephemeral mode, but owned by this process:

- it may take `startup_timeout_s` (default 120 s, `COEVOLVE_PREFECT_STARTUP_S`) to answer, so a busy
  machine does not fail the run (Prefect's own ephemeral server gives up after 20 s), and a server that
  still does not answer ends in one message naming PREFECT_API_URL;
- it is stopped when the command ends, and on Linux it receives SIGTERM if this process dies in any way,
  `kill -9` included (`PR_SET_PDEATHSIG`), so no server is left listening.

    with prefect_api() as url:          # sets PREFECT_API_URL for this process while it runs
        coevolve(...)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from coevolve.processes import die_with_parent, free_port

STARTUP_TIMEOUT_S = float(os.environ.get("COEVOLVE_PREFECT_STARTUP_S", "120"))
SERVER_COMMAND = "PREFECT_SERVER_ANALYTICS_ENABLED=false prefect server start --host 127.0.0.1 --port 4200"


class PrefectApiError(RuntimeError):
    """No Prefect API could be reached or started; the message says what to do."""


def configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment, else from the active Prefect profile."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    return get_current_settings().api.url


def healthy(url: str, timeout: float = 3.0) -> bool:
    import httpx

    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def prefect_api(*, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """The configured Prefect API (checked), or a temporary server for the duration of the block."""
    url = configured_api_url()
    if url:
        if not healthy(url):
            raise PrefectApiError(
                f"no Prefect server answers at PREFECT_API_URL={url}. Start one with `{SERVER_COMMAND}`, or unset "
                f"PREFECT_API_URL to run on a temporary local server.")  # fmt: skip
        yield url
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server, url = _start_temporary_server(startup_timeout_s)
    os.environ["PREFECT_API_URL"] = url  # for child processes
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):  # for this one, whatever it imported already
            try:
                yield url
            finally:
                _flush_logs()  # the flow's last log lines reach the server before it stops
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        _stop(server)


def _flush_logs() -> None:
    from prefect.logging.handlers import APILogHandler

    with contextlib.suppress(Exception):  # nothing to flush, or the worker already stopped
        APILogHandler().flush()


def _start_temporary_server(timeout_s: float) -> tuple[subprocess.Popen, str]:
    import prefect

    port = free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}  # fmt: skip
    command = [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent), "--factory",
               "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "error", "--lifespan", "on"]  # fmt: skip
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              preexec_fn=die_with_parent, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            break
        if healthy(url, timeout=2.0):
            return server, url
        time.sleep(0.2)
    _stop(server)
    detail = (server.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1] if server.stderr else ""
    raise PrefectApiError(
        f"the temporary Prefect server did not answer within {timeout_s:.0f} s{f' ({detail})' if detail else ''}. "
        f"On a busy machine, raise COEVOLVE_PREFECT_STARTUP_S, or start a server once with `{SERVER_COMMAND}` and "
        f"set PREFECT_API_URL=http://127.0.0.1:4200/api.")  # fmt: skip


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)

