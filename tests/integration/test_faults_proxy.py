"""Fault: the machine is behind a company proxy. HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name a proxy that
cannot reach this machine's loopback (`tests.fakes.proxy.RecordingProxy`: it answers 502 to everything and
records what it was sent), and NO_PROXY is not set, as on most company networks. A run on a fresh
PREFECT_HOME starts its temporary Prefect server, checks its health, reports every flow and task run to it
through Prefect's own client, and completes, without one request reaching the proxy.

Before loopback went direct (`coevolve.loopback`), the run ended after the startup timeout with "the
temporary Prefect server did not answer", its health checks all sent to the proxy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CONFIGS
from tests.fakes.proxy import NO_PROXY_VARIABLES, RecordingProxy

pytestmark = pytest.mark.slow

PREFECT_CLIENT = """
from prefect.client.orchestration import get_client
from coevolve.flows.prefect_api import healthy, prefect_api
with prefect_api() as url, get_client(sync_client=True) as client:
    print(healthy(url), client.api_healthcheck() is None, client.read_flows(limit=1) == [], flush=True)
"""


def behind_the_proxy(proxy: RecordingProxy, home: Path) -> dict[str, str]:
    """This environment behind `proxy`, without NO_PROXY or any Prefect setting, on a fresh `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k not in NO_PROXY_VARIABLES}
    return {**env, **proxy.environment(), "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def test_prefect_client_calls_to_the_temporary_server_go_around_the_proxy(tmp_path):
    with RecordingProxy() as proxy:
        env = behind_the_proxy(proxy, tmp_path / "prefect")
        done = subprocess.run([sys.executable, "-c", PREFECT_CLIENT], env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "True", "True"], done.stdout
    assert proxy.requests == []


def test_a_run_behind_a_proxy_without_no_proxy_completes_and_sends_it_nothing(tmp_path):
    root = tmp_path / "runs"
    command = [str(Path(sys.executable).with_name("coevolve")), "run", str(CONFIGS / "test-tiny.yaml"),
               "--rounds", "1", "--root", str(root)]  # fmt: skip
    with RecordingProxy() as proxy:
        env = behind_the_proxy(proxy, tmp_path / "prefect")
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (root / "run=test-tiny" / "round=0" / "stage=evaluate" / "_manifest.json").is_file()
    assert proxy.requests == []
