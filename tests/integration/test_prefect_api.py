"""The temporary Prefect server of `flows.prefect_api`, started for real on loopback ports: commands started
at once on a fresh PREFECT_HOME, and a server that exits before it answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# imports what it needs, says so (file argv[2]), waits for the file `go` (argv[1]) so that the commands start
# their servers within milliseconds of each other, then starts one and checks that it answers
COMMAND = """
import sys, time
from pathlib import Path
import httpx, prefect, prefect.settings
from coevolve.flows.prefect_api import healthy, prefect_api
Path(sys.argv[2]).touch()
while not Path(sys.argv[1]).exists():
    time.sleep(0.05)
with prefect_api() as url:
    print(url if healthy(url) else "no answer", flush=True)
"""


def fresh_prefect_env(home: Path) -> dict[str, str]:
    """This environment without any Prefect setting (no configured API, database or profile), on `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return {**env, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def wait_for(paths: list[Path], deadline: float) -> None:
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_commands_started_at_once_on_a_fresh_prefect_home_both_get_a_server(tmp_path):
    """Two servers migrating one fresh SQLite database crash each other ('duplicate column name') when one
    slips into the other's migrations between two of its transactions: without the startup lock, one run of
    this test in three or four failed on a busy 2-core machine."""
    home, go, ready = tmp_path / "prefect", tmp_path / "go", [tmp_path / "ready-a", tmp_path / "ready-b"]
    env = fresh_prefect_env(home)
    deadline = time.monotonic() + 300  # imports, then two startups one after the other, on a busy machine
    commands = [subprocess.Popen([sys.executable, "-c", COMMAND, str(go), str(path)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for path in ready]  # fmt: skip
    try:
        wait_for(ready, deadline)
        assert not (home / "prefect.db").exists()  # importing Prefect makes PREFECT_HOME, not the database
        go.touch()
        outputs = [command.communicate(timeout=max(1.0, deadline - time.monotonic())) for command in commands]
    finally:
        for command in commands:
            command.kill()
    for command, (out, err) in zip(commands, outputs, strict=True):
        assert command.returncode == 0, err[-2000:]
        assert out.strip().startswith("http://127.0.0.1:") and out.strip().endswith("/api"), out
    assert (home / "prefect.db").is_file()


def test_a_temporary_server_that_exits_is_named_with_its_exit_code_and_log(tmp_path, monkeypatch):
    from coevolve.flows.prefect_api import PrefectApiError, prefect_api

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    missing = f"sqlite+aiosqlite:///{tmp_path}/missing/prefect.db"  # a folder that does not exist
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", missing)
    monkeypatch.setattr("coevolve.flows.prefect_api.configured_api_url", lambda: None)
    started = time.monotonic()
    exited = r"exited with code \d+ before it answered\. The end of its log:\n"
    with pytest.raises(PrefectApiError, match=exited) as error, prefect_api(startup_timeout_s=120):
        pass
    assert time.monotonic() - started < 100  # it did not wait out the timeout
    assert "unable to open database file" in str(error.value), error.value
    assert "PREFECT_API_URL" not in os.environ
