"""`check_environment`: AppWorld with the fake server up and with nothing listening; the built-in envs."""

from __future__ import annotations

import pytest

from coevolve.envs.appworld.client import SETUP_COMMAND
from coevolve.flows.env_check import check_environment, ready
from coevolve.processes import free_port
from tests.fakes.appworld_server import FAKE_TASKS, FakeAppWorldServer


@pytest.fixture
def fake():
    server = FakeAppWorldServer().start()
    yield server
    server.stop()


def test_appworld_ready_when_the_server_answers(fake, monkeypatch):
    monkeypatch.setenv("APPWORLD_URL", fake.url)  # the default URL comes from the environment
    findings = check_environment("appworld", {"split_tasks": {"dev": list(FAKE_TASKS)}})
    assert ready(findings), findings
    assert f"ok: AppWorld server answers at {fake.url}" in findings
    assert any(line.startswith("ok: AppWorld task ids") and line.endswith("dev 3") for line in findings)
    assert "ok: the server loads task a1b2c3d_1" in findings
    assert "note: no task ids for train, test_normal, test_challenge" in findings


def test_appworld_says_what_is_missing_when_nothing_listens(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .venv-appworld and no data/ here
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    port = free_port()
    findings = check_environment("appworld", {"base_url": f"http://127.0.0.1:{port}", "timeout": 2})
    assert not ready(findings)
    assert findings[0].startswith(f"missing: AppWorld server not reachable at http://127.0.0.1:{port}")
    assert f"  run: {SETUP_COMMAND}" in findings
    assert f"  run: .venv-appworld/bin/appworld serve environment --port {port}" in findings
    assert any(line.startswith("missing: no AppWorld task ids") for line in findings)
    assert f"  run: cd {tmp_path} && .venv-appworld/bin/appworld download data" in findings


def test_appworld_server_without_task_data_is_reported(fake):
    findings = check_environment("appworld", {"base_url": fake.url, "split_tasks": {"dev": ["fffffff_1"]}})
    assert not ready(findings)
    assert any(
        line.startswith("missing: the server cannot load task fffffff_1 (HTTP 500") for line in findings
    )


def test_builtin_environments_report_counts_and_versions():
    toolworld = check_environment("toolworld", {"n_train": 4, "n_test": 2, "n_heldout": 2})
    assert ready(toolworld) and "tasks train 4, test 2, validation 48, heldout-templates 2" in toolworld[0]
    bfcl = check_environment("bfcl")
    assert (
        ready(bfcl) and "bfcl-eval 2026.3.23" in bfcl[-1] and "all 200, ae-train 100, ae-test 100" in bfcl[-1]
    )
    (unknown,) = check_environment("nowhere")
    assert unknown.startswith("missing: unknown environment 'nowhere'; available: ") and "appworld" in unknown
