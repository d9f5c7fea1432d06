"""The learning benchmark's coverage table: what a run's admitted tasks and explorations reach that its D_0
never exercises (offered-but-unused tools, new multi-call compositions)."""

from __future__ import annotations

import json
import shutil

from coevolve import envs
from coevolve.benchmarks.learning.coverage import called_tools, coverage
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS

RUN = "learning-coevolve-s0"


def first_of(family: str):
    return next(task for task in envs.make("toolworld", seed=0).tasks("train") if task.family == family)


def triple(i: int, tool: str, ok: bool = True) -> dict:
    return {"triple_id": f"r{i}", "group_id": "g", "exploration_id": "g", "trajectory_id": "tr", "task_id": "t",
            "seq": i, "step": i, "call_index": 0, "turn": 0, "tool": tool, "arguments": "{}", "observation": "{}",
            "ok": ok, "state_before": None, "state_after": None, "changed": None}  # fmt: skip


def test_called_tools_in_order_across_turns():
    solution = [[{"name": "get_balance", "arguments": {}}], [{"name": "transfer", "arguments": {}},
                                                             {"name": "get_balance", "arguments": {}}]]
    assert called_tools(json.dumps(solution)) == ["get_balance", "transfer", "get_balance"]
    assert called_tools(None) == []


def test_coverage_counts_what_the_evolved_data_reaches_beyond_d0(tmp_path):
    # D_0: one bank_balance task (offered list_accounts, get_balance, transfer, deposit, withdraw,
    # list_transfers; calls get_balance): five offered tools it never calls
    seed, two_step, single = first_of("bank_balance"), first_of("balance_then_transfer"), first_of("transfer_funds")
    assert [c.name for turn in two_step.solution for c in turn] == ["get_balance", "transfer", "get_balance"]
    layout = RunLayout(tmp_path, RUN)
    layout.run_dir.mkdir(parents=True)
    shutil.copy(CONFIGS / "test-tiny.yaml", layout.config_path)
    store = RunStore(layout)
    store.write(0, "bootstrap", "tasks", [seed.to_row()])
    store.write(0, "bootstrap", "datasets", [{"dataset_version": 0, "task_id": seed.id, "weight": 1.0, "added_round": 0}])
    store.write(1, "merge", "tasks", [two_step.to_row(), single.to_row()])
    store.write(1, "merge", "datasets", [
        {"dataset_version": 1, "task_id": task.id, "weight": 1.0, "added_round": added}
        for task, added in ((seed, 0), (two_step, 1), (single, 1))])  # fmt: skip
    store.write(1, "triples", "triples", [
        triple(0, "list_accounts"),  # offered to D_0, never called by it: reached
        triple(1, "deposit", ok=False),  # failed: not reached
        triple(2, "send_message"),  # called, but never offered to D_0's tasks
        triple(3, "get_balance")])  # fmt: skip
    assert coverage(tmp_path, [RUN]).to_dicts() == [{
        "run": RUN, "unused_tools": 5, "explored_unused": 1, "admitted_unused": 1,  # transfer
        "admitted": 2, "admitted_multi": 1, "new_compositions": 1}]  # fmt: skip


def test_a_run_without_artifacts_has_no_row(tmp_path):
    layout = RunLayout(tmp_path, "learning-grpo-s0")
    layout.run_dir.mkdir(parents=True)
    shutil.copy(CONFIGS / "test-tiny.yaml", layout.config_path)
    assert coverage(tmp_path, ["learning-grpo-s0"]).height == 0
