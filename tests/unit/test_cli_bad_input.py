"""Bad input ends in one line on stderr naming the field and what it may be, exit status 2, before Prefect
starts or a model loads: run names that cannot be folders, models, environments, options and splits that
do not exist."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from tests.conftest import CONFIGS

TINY = str(CONFIGS / "test-tiny.yaml")


@pytest.mark.parametrize(("args", "says"), [
    (["run", TINY, "--run", "../x"], "--run: invalid run name '../x'"),
    (["run", TINY, "--set", "run.name=a/b"], "run.name: invalid run name 'a/b'"),
    (["stage", "rollout", "--run", "../x", "--round", "0"], "invalid run name '../x'"),
    (["fork", "--from", "../x", "--run", "y"], "invalid run name '../x'"),
    (["run", TINY, "--set", "model.name=/no/such/model"], "model.name: '/no/such/model' is neither a model directory"),
    (["run", TINY, "--set", "env.name=nope"], "env.name: unknown environment 'nope'; available: appworld, bfcl"),
    (["run", TINY, "--set", "env.options.foo=1"], "env.options.foo: toolworld takes no such option; its options: seed"),
    (["run", TINY, "--set", "env.options.tools=some"], "env.options.tools: input should be 'involved' or 'all' (got 'some')"),
    (["run", TINY, "--set", "eval.splits=[tset]"], "eval.splits: toolworld has no split 'tset'; its splits: train"),
    (["run", TINY, "--set", "dataset.seed_split=nope"], "dataset.seed_split: toolworld has no split 'nope'"),
    (["run", TINY, "--set", "evolve.window=3"], "evolve.window is now signals.window"),
])  # fmt: skip
def test_bad_input_is_one_line_naming_the_field(tmp_path, args, says):
    result = CliRunner().invoke(app, [*args, "--root", str(tmp_path)], terminal_width=400)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output
    assert not (tmp_path / "run=x").exists()
