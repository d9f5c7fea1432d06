"""Stored text is shown literally by every output that prints it (`coevolve sql`, `show`, `runs`, the round
lines): Rich markup, markup close tags, ANSI escapes, very long lines and replacement characters."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.flows.show import show
from coevolve.flows.summary import round_line
from coevolve.storage.layout import RunLayout
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.store import RunStore

HOSTILE = ["ls(a[b]c)", "[/oops]", "see [/tmp/x]", "[cd(folder='document'), mkdir(dir_name='temp')]",
           "[bold red]not bold[/]", "\x1b[31mred\x1b[0m", "bad \ufffd byte", "L" + "o" * 3000 + "ng"]  # fmt: skip
VISIBLE = {"\x1b[31mred\x1b[0m": "\\x1b[31mred\\x1b[0m"}
"""How a control character appears: as its escape, never sent to the terminal."""


def shown(text: str) -> str:
    return VISIBLE.get(text, text)[:40]


@pytest.mark.parametrize("text", HOSTILE)
def test_sql_prints_stored_text_literally(tmp_path, text):
    quoted = text.replace("'", "''")
    result = CliRunner().invoke(app, ["sql", f"SELECT '{quoted}' AS value", "--root", str(tmp_path)],
                                terminal_width=5000)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert shown(text) in result.output
    assert "\x1b[31m" not in result.output


def _trajectory(store: RunStore, text: str) -> str:
    base = {f.name: None for f in ARTIFACTS["trajectories"]}
    row = {**base, "trajectory_id": "t0", "source": "rollout", "task_id": text, "group_id": "g", "sample": 0,
           "policy_version": "p", "reward": 0.0, "success": False, "finish": "done", "error": text, "num_turns": 1,
           "num_steps": 1, "num_tool_calls": 1, "num_tool_errors": 0, "prompt_tokens": 1, "completion_tokens": 1,
           "messages": json.dumps([{"role": "user", "content": text}, {"role": "assistant", "content": text}]),
           "eval_details": json.dumps({"note": text})}  # fmt: skip
    del row["run"], row["round"]
    step = {"trajectory_id": "t0", "source": "rollout", "task_id": text, "step": 0, "turn": 0, "call_index": 0,
            "kind": "call", "tool": text, "arguments": json.dumps({"x": text}), "ok": False, "observation": text,
            "reply": text}  # fmt: skip
    store.write(0, "rollout", "trajectories", [row])
    store.write(0, "rollout", "steps", [step])
    return "t0"


@pytest.mark.parametrize("text", HOSTILE)
def test_show_prints_stored_text_literally(tmp_path, text):
    store = RunStore(RunLayout(tmp_path, "demo"))
    console = Console(record=True, width=5000, force_terminal=False)
    show("trajectory", _trajectory(store, text), tmp_path, console=console)
    out = console.export_text()
    assert shown(text) in out
    assert "\x1b" not in out


def test_runs_and_round_lines_are_plain_text(tmp_path):
    row = {"round": 0, "train_success": 0.5, "train_reward": 0.1, "forgetting_signals": None, "boundary_signals": None,
           "rare_signals": None, "dataset_size": 3, "loss": 0.0, "eval_test_success": 0.25}  # fmt: skip
    line = round_line(row, ["[/x]"])
    assert line.endswith("cached: [/x]") and "test 25%" in line
    result = CliRunner().invoke(app, ["runs", "--root", str(tmp_path)])
    assert result.exit_code == 0 and "no runs under" in result.output


def test_sql_caps_a_table_at_max_rows_and_says_how_to_see_the_rest(tmp_path):
    statement = "SELECT range AS n FROM range(30)"
    capped = CliRunner().invoke(app, ["sql", statement, "--max-rows", "5", "--root", str(tmp_path)], terminal_width=80)
    assert capped.exit_code == 0, capped.output
    assert "... 25 more rows (--max-rows 30 shows them; --format csv prints all)" in capped.output
    assert " 4 " in capped.output and " 5 " not in capped.output
    everything = CliRunner().invoke(app, ["sql", statement, "--max-rows", "30", "--root", str(tmp_path)])
    assert " 29" in everything.output and "more rows" not in everything.output
    refused = CliRunner().invoke(app, ["sql", statement, "--max-rows", "0", "--root", str(tmp_path)])
    assert refused.exit_code == 2 and "--max-rows must be >= 1" in refused.output
