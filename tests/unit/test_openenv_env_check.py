"""A user's path onto an OpenEnv environment: `coevolve env list` shows the adapter (or that its extra is
missing); `coevolve env check --config` says what is missing in one line each: the extra, an import path
that does not import, a server that does not answer."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.processes import free_port

TOOLWORLD = "coevolve.envs.openenv.toolworld_server:ToolWorldOpenEnv"


def config(tmp_path, **options):
    lines = "".join(f"    {key}: {value}\n" for key, value in options.items())
    path = tmp_path / "my-openenv.yaml"
    body = f"\n{lines}" if lines else " {}\n"
    path.write_text(f"run:\n  name: mine\nenv:\n  name: openenv\n  options:{body}", encoding="utf-8")
    return path


def check(tmp_path, **options):
    result = CliRunner().invoke(app, ["env", "check", "--config", str(config(tmp_path, **options))])
    return result.exit_code, result.output.splitlines()


def listed():
    result = CliRunner().invoke(app, ["env", "list"])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if line.startswith("openenv:"))


def test_env_list_shows_the_adapter_and_the_shipped_environments():
    pytest.importorskip("openenv")
    line = listed()
    assert line.startswith("openenv: adapter for OpenEnv environments") and TOOLWORLD in line


def test_env_list_and_check_say_when_the_extra_is_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "openenv", None)  # as if the extra were not installed
    assert "the openenv extra is not installed" in listed()
    code, lines = check(tmp_path, environment=TOOLWORLD)
    assert code == 1 and lines == ["missing: the openenv extra is not installed (no module 'openenv')",
                                   "  run: .venv/bin/pip install -e '.[openenv]'"]  # fmt: skip


@pytest.mark.parametrize(("options", "expected"), [
    ({"environment": "no_such_package.env:Env"}, "missing: env.options.environment: cannot import 'no_such_package.env'"),
    ({"url": "http://127.0.0.1:{port}"}, "missing: env.options.url: no OpenEnv server answers at http://127.0.0.1:"),
    ({}, "missing: no OpenEnv environment named: set env.options.environment"),
])  # fmt: skip
def test_env_check_names_what_is_missing_in_one_line(tmp_path, options, expected):
    pytest.importorskip("openenv")
    code, lines = check(tmp_path, **{k: v.format(port=free_port()) for k, v in options.items()})
    assert code == 1 and len(lines) == 1 and lines[0].startswith(expected), lines


def test_env_check_of_a_working_config_counts_its_tasks(tmp_path):
    pytest.importorskip("openenv")
    code, lines = check(tmp_path, environment=TOOLWORLD)
    assert code == 0, lines
    assert lines == [f"ok: env.options.environment {TOOLWORLD} imports",
                     "ok: openenv: tasks train 200, test 48, validation 48, heldout-templates 48"]  # fmt: skip
