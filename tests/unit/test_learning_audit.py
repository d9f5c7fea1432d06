"""The learning benchmark's audit rows: per exploration, per admitted task, per evaluated episode, and the gap's
link table computed from them alone."""

from __future__ import annotations

import json
import shutil

from coevolve.benchmarks.learning.audit import (
    admitted_rows,
    eval_tool_rows,
    exploration_rows,
    link_table,
    named_tools,
)
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS

RUN = "coverage-coevolve-s0"


def filled(artifact: str, rows: list[dict]) -> list[dict]:
    """`rows` with every other non-nullable column of `artifact` given a placeholder of its type."""
    import pyarrow as pa

    from coevolve.storage.schemas import schema_for

    blank = {pa.types.is_string: "-", pa.types.is_boolean: False, pa.types.is_integer: 0, pa.types.is_floating: 0.0}
    defaults = {}
    for field in schema_for(artifact):
        if not field.nullable and field.name not in ("run", "round"):
            defaults[field.name] = next(v for test, v in blank.items() if test(field.type))
    return [{**defaults, **row} for row in rows]


def call(name: str) -> dict:
    return {"name": name, "arguments": {}}


def stored_run(tmp_path) -> None:
    """Round 1 of a run: an `unused` signal naming `deposit` explored (deposit ran, one candidate admitted, one
    discarded) and a boundary signal explored (nothing ran); a final evaluation on gap-validation."""
    layout = RunLayout(tmp_path, RUN)
    layout.run_dir.mkdir(parents=True)
    shutil.copy(CONFIGS / "test-tiny.yaml", layout.config_path)
    store = RunStore(layout)
    store.write(1, "signals", "signals", filled("signals", [
        {"signal_id": "s-unused", "kind": "unused", "task_id": "t0", "evidence": json.dumps({"tool": "deposit"})},
        {"signal_id": "s-boundary", "kind": "boundary", "task_id": "t0", "evidence": json.dumps({"mean": 0.5})}]))
    store.write(1, "explore", "explorations", filled("explorations", [
        {"exploration_id": "x1", "signal_id": "s-unused", "kind": "unused", "task_id": "t0",
         "context": json.dumps({"tools": ["deposit", "list_accounts"]}), "status": "ok"},
        {"exploration_id": "x2", "signal_id": "s-boundary", "kind": "boundary", "task_id": "t0",
         "context": json.dumps({"tools": []}), "status": "ok"}]))  # fmt: skip
    store.write(1, "triples", "triples", filled("triples", [
        {"triple_id": "a", "exploration_id": "x1", "tool": "deposit", "ok": True, "seq": 0},
        {"triple_id": "b", "exploration_id": "x1", "tool": "withdraw", "ok": False, "seq": 1},
        {"triple_id": "c", "exploration_id": "x2", "tool": "get_balance", "ok": False, "seq": 0}]))  # fmt: skip
    store.write(1, "abstract", "candidates", filled("candidates", [
        {"candidate_id": "c1", "exploration_id": "x1", "status": "ok", "query": "Deposit 5 into SAV-1.",
         "solution": json.dumps([call("deposit")])},
        {"candidate_id": "c2", "exploration_id": "x1", "status": "ok", "query": "What is my balance?",
         "solution": json.dumps([call("deposit"), call("get_balance")])}]))  # fmt: skip
    store.write(1, "verify", "verifications", filled("verifications", [
        {"verification_id": "v1", "candidate_id": "c1", "outcome": "accept", "reason": "solved by replay",
         "task_id": "task-new"},
        {"verification_id": "v2", "candidate_id": "c2", "outcome": "discard",
         "reason": "a question paired with a state change"}]))  # fmt: skip
    store.write(0, "bootstrap", "datasets", filled("datasets", [{"dataset_version": 0, "task_id": "t0", "weight": 1.0, "added_round": 0}]))
    store.write(1, "merge", "datasets", filled("datasets", [
        {"dataset_version": 1, "task_id": task, "weight": 1.0, "added_round": added}
        for task, added in (("t0", 0), ("task-new", 1))]))  # fmt: skip
    store.write(1, "merge", "tasks", filled("tasks", [
        {"task_id": "task-new", "env": "toolworld", "split": "synthesized", "family": "synth:deposit",
         "source": "synthesized", "turns": json.dumps(["Deposit 5 into SAV-1."]),
         "solution": json.dumps([[call("deposit")]]), "lineage": json.dumps({"exploration_id": "x1"})}]))  # fmt: skip
    store.write(1, "evaluate", "evals", filled("evals", [
        {"split": "gap-validation", "task_id": f"g{i}", "family": "deposit_funds", "trajectory_id": f"e{i}",
         "success": i < 2} for i in range(3)]))  # fmt: skip
    store.write(1, "evaluate", "steps", filled("steps", [
        {"trajectory_id": "e0", "source": "eval:gap-validation", "task_id": "g0", "step": 0, "call_index": 0,
         "kind": "call", "tool": "list_accounts", "ok": True},
        {"trajectory_id": "e0", "source": "eval:gap-validation", "task_id": "g0", "step": 1, "call_index": 0,
         "kind": "call", "tool": "deposit", "ok": True},
        {"trajectory_id": "e1", "source": "eval:gap-validation", "task_id": "g1", "step": 0, "call_index": 0,
         "kind": "call", "tool": "get_balance", "ok": True}]))  # fmt: skip


def test_each_exploration_row_names_its_signal_tools_calls_candidates_verdicts_and_admitted_tasks(tmp_path):
    stored_run(tmp_path)
    rows = {r["exploration_id"]: r for r in exploration_rows(tmp_path, [RUN]).to_dicts()}
    unused, boundary = rows["x1"], rows["x2"]
    assert (unused["signal_kind"], json.loads(unused["signal_tools"])) == ("unused", ["deposit"])
    assert json.loads(unused["context_tools"]) == ["deposit", "list_accounts"]
    assert json.loads(unused["called_ok"]) == ["deposit"]  # withdraw failed
    assert unused["candidates"] == 2 and json.loads(unused["candidate_tools"]) == [["deposit"], ["deposit", "get_balance"]]
    assert json.loads(unused["verdicts"]) == ["accept: solved by replay", "discard: a question paired with a state change"]
    assert json.loads(unused["admitted_task_ids"]) == ["task-new"]
    assert json.loads(boundary["signal_tools"]) == [] and json.loads(boundary["called_ok"]) == []
    assert boundary["candidates"] == 0


def test_admitted_tasks_and_evaluated_tools_are_rows(tmp_path):
    stored_run(tmp_path)
    assert admitted_rows(tmp_path, [RUN]).select("task_id", "exploration_id", "query", "verdict").to_dicts() == [
        {"task_id": "task-new", "exploration_id": "x1", "query": "Deposit 5 into SAV-1.", "verdict": "accept"}]
    evals = {r["task_id"]: r for r in eval_tool_rows(tmp_path, [RUN]).to_dicts()}
    assert json.loads(evals["g0"]["tools_called"]) == ["list_accounts", "deposit"]
    assert json.loads(evals["g2"]["tools_called"]) == [] and not evals["g2"]["success"]
    assert eval_tool_rows(tmp_path, [RUN], splits=("validation",)).height == 0


def test_the_link_table_is_computed_from_the_rows(tmp_path):
    """Of two explorations one signal names a gap tool and its episode called it: yield 1/1; one of two gap
    successes called a gap tool, the other solved it without (the lookup a listing exposes)."""
    stored_run(tmp_path)
    links = link_table(exploration_rows(tmp_path, [RUN]), admitted_rows(tmp_path, [RUN]),
                       eval_tool_rows(tmp_path, [RUN]), {RUN: {"deposit", "withdraw"}})  # fmt: skip
    assert links.to_dicts() == [{
        "run": RUN, "explorations": 2, "named_gap": 1, "called_named": 1, "called_gap": 1, "gap_candidates": 2,
        "admitted_gap": 1, "gap_eval_final": 3, "gap_solved": 2, "gap_solved_calling_gap": 1}]  # fmt: skip


def test_a_rare_signal_names_its_tool_patterns_and_a_boundary_signal_none():
    evidence = {"pattern_kind": "bigram", "patterns": [{"pattern": "get_balance>deposit", "count": 1}]}
    assert named_tools("rare", json.dumps(evidence)) == ["get_balance", "deposit"]
    assert named_tools("rare", json.dumps({"pattern_kind": "task", "patterns": [{"pattern": "t0"}]})) == []
    assert named_tools("boundary", json.dumps({"mean": 0.5})) == [] and named_tools(None, None) == []
