"""The Prefect API a command talks to: the configured server, or a temporary one that dies with the process.

`coevolve run` and `coevolve stage` need a Prefect API. With PREFECT_API_URL set (or a profile naming a
server) that server is used, after a health check. Without one, a temporary local server is started:
Prefect's own server app under uvicorn on a free loopback port, with its state in PREFECT_HOME like
Prefect's ephemeral mode, but owned by this process:

- it may take `startup_timeout_s` (default 120 s, `COEVOLVE_PREFECT_STARTUP_S`) to answer, so a busy
  machine does not fail the run (Prefect's own ephemeral server gives up after 20 s), and a server that
  still does not answer ends in one message naming PREFECT_API_URL; one that exits first ends in one
  naming its exit code, with the end of its log;
- commands started at once start their servers one at a time (a file lock in PREFECT_HOME): each server
  migrates PREFECT_HOME's SQLite database on startup, and two migrating a fresh one at once crash;
- the URL is exported to child processes (`bench learning --jobs`), so they report to the same API,
  configured or temporary;
- loopback is reached directly, whatever proxy the environment names (`coevolve.loopback`): the health
  checks ignore the proxy for a loopback URL, and for the block NO_PROXY names the loopback hosts, so
  Prefect's own client, the server and every child process go straight to the temporary server;
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
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from coevolve.loopback import direct_loopback, http_client
from coevolve.processes import die_with_parent, free_port

LOG_TAIL_LINES = 6
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
    """Whether the API at `url` answers its health check (directly, when it is on loopback)."""
    import httpx

    try:
        with http_client(url, timeout=timeout) as client:
            return client.get(url.rstrip("/") + "/health").status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def prefect_api(*, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """The configured Prefect API (checked), or a temporary server for the duration of the block; loopback
    is reached without a proxy meanwhile (`direct_loopback`)."""
    with direct_loopback(), _checked_or_temporary_api(startup_timeout_s) as url:
        yield url


@contextlib.contextmanager
def _checked_or_temporary_api(startup_timeout_s: float) -> Iterator[str]:
    url = configured_api_url()
    if url:
        if not healthy(url):
            raise PrefectApiError(
                f"no Prefect server answers at PREFECT_API_URL={url}. Start one with `{SERVER_COMMAND}`, or unset "
                f"PREFECT_API_URL to run on a temporary local server.")  # fmt: skip
        with _exported(url):
            yield url
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server, url = _start_temporary_server(startup_timeout_s)
    try:
        # the environment for child processes, the settings for this one (whatever it imported already)
        with _exported(url), temporary_settings(updates={PREFECT_API_URL: url}):
            try:
                yield url
            finally:
                _flush_logs()  # the flow's last log lines reach the server before it stops
    finally:
        _stop(server)


@contextlib.contextmanager
def _exported(url: str) -> Iterator[None]:
    """PREFECT_API_URL=url in os.environ for the block, then as it was. Child processes read only the
    environment and the profile, and a configured URL may live in neither (Prefect's test harness sets it
    in this process's settings); without it each child would start a temporary server of its own."""
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


def _flush_logs() -> None:
    from prefect.logging.handlers import APILogHandler

    with contextlib.suppress(Exception):  # nothing to flush, or the worker already stopped
        APILogHandler().flush()


def _start_temporary_server(timeout_s: float) -> tuple[subprocess.Popen, str]:
    """A server that answers, started while no other command of this PREFECT_HOME starts one."""
    with _startup_lock():
        return _start_server(timeout_s)


def _startup_lock() -> contextlib.AbstractContextManager:
    """A file lock in PREFECT_HOME, held from a server's start until it answers. A server migrates the
    database on startup; two migrating a fresh one at once crash ('duplicate column name'), and once one
    answers the database is migrated, so the next starts on it without writing the schema. Waiting for it
    is bounded by the holder's own startup timeout (and the lock goes with a holder that dies)."""
    from filelock import FileLock
    from prefect.settings import get_current_settings

    home = Path(get_current_settings().home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return FileLock(str(home / ".coevolve-server-start.lock"))


def _start_server(timeout_s: float) -> tuple[subprocess.Popen, str]:
    import prefect

    port = free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}  # fmt: skip
    command = [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent), "--factory",
               "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "error", "--lifespan", "on"]  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    # its log goes to an unnamed file, not a pipe nobody reads while the command runs (a full pipe blocks
    # the server); the file goes with the server, and until it answers this process reads its tail
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=log, preexec_fn=die_with_parent,
                                  start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and server.poll() is None:
            if healthy(url, timeout=2.0):
                return server, url
            time.sleep(0.2)
        exit_code = server.poll()
        _stop(server)
        raise PrefectApiError(_startup_failure(exit_code, timeout_s, _tail(log)))


def _tail(log) -> str:
    log.seek(0)
    lines = [line for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in lines[-LOG_TAIL_LINES:])


def _startup_failure(exit_code: int | None, timeout_s: float, tail: str) -> str:
    """Why the temporary server is not there: it exited (the cause is in its log), or it did not answer."""
    log = f" The end of its log:\n{tail}" if tail else ""
    if exit_code is not None:
        return f"the temporary Prefect server exited with code {exit_code} before it answered.{log}"
    return (f"the temporary Prefect server did not answer within {timeout_s:.0f} s. On a busy machine, raise "
            f"COEVOLVE_PREFECT_STARTUP_S, or start a server once with `{SERVER_COMMAND}` and set "
            f"PREFECT_API_URL=http://127.0.0.1:4200/api.{log}")  # fmt: skip


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
