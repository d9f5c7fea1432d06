"""Triples (step 4): explored calls with replayed state digests, and the groups abstraction reads."""

from __future__ import annotations

import json
from dataclasses import replace

from coevolve.core import ToolCall
from coevolve.stages.abstract.abstraction import build_groups, single_call_groups
from coevolve.stages.triples.grouping import build_triples, group_id
from tests.unit.evolution_world import family, make_env


def test_triples_replay_digests_call_by_call(explored):
    triples = build_triples(make_env, explored.artifacts["explorations"], explored.artifacts["steps"])
    by_exploration: dict[str, list[dict]] = {}
    for row in triples:
        by_exploration.setdefault(row["exploration_id"], []).append(row)
    assert set(by_exploration) == {"x0", "x1", "x2"}  # no episodes, no triples
    assert [r["changed"] for r in by_exploration["x0"]] == [False, False]  # get_balance reads, twice (R=2)
    assert [r["changed"] for r in by_exploration["x1"]] == [True, True]  # send_message writes
    chain = [
        r for r in by_exploration["x2"] if r["trajectory_id"] == by_exploration["x2"][0]["trajectory_id"]
    ]
    assert [(r["tool"], r["turn"], r["changed"]) for r in chain] == [
        ("get_balance", 0, False),
        ("transfer", 1, True),
        ("get_balance", 1, False),
    ]
    assert (
        chain[0]["state_after"] == chain[1]["state_before"]
        and chain[1]["state_after"] == chain[2]["state_before"]
    )
    assert {r["group_id"] for r in by_exploration["x2"]} == {group_id("x2")}
    assert all(r["ok"] for r in triples)


def test_triples_split_a_multi_call_reply(world):
    task = family(world.train, "bank_balance")
    account = next(iter(task.initial_state["bank"]["accounts"]))
    other = [a for a in task.initial_state["bank"]["accounts"] if a != account][0]
    reply = "two calls"
    steps = [
        {
            "step": 0,
            "call_index": 0,
            "turn": 0,
            "kind": "call",
            "tool": "get_balance",
            "ok": True,
            "reply": reply,
            "arguments": json.dumps({"account_id": account}),
            "observation": "r",
            "trajectory_id": "tr",
        },
        {
            "step": 0,
            "call_index": 1,
            "turn": 0,
            "kind": "call",
            "tool": "transfer",
            "ok": True,
            "reply": reply,
            "arguments": json.dumps({"from_account": account, "to_account": other, "amount": 1.0}),
            "observation": "r",
            "trajectory_id": "tr",
        },
    ]
    x = {"exploration_id": "x", "task_id": task.id, "trajectory_ids": json.dumps(["tr"]),
         "task": json.dumps(task.to_row())}
    rows = build_triples(make_env, [x], steps)
    assert [r["changed"] for r in rows] == [False, True]
    assert rows[0]["state_after"] == rows[1]["state_before"]


def test_groups_collect_distinct_ok_calls_in_order(explored):
    triples = build_triples(make_env, explored.artifacts["explorations"], explored.artifacts["steps"])
    groups = build_groups(triples, {t.exploration_id: t.task for t in explored.targets})
    by_id = {g.exploration_id: g for g in groups}
    assert [c["tool"] for c in by_id["x2"].calls] == ["get_balance", "transfer", "get_balance"]
    assert [c["changed"] for c in by_id["x2"].calls] == [False, True, False]  # from the replayed digests
    assert len(by_id["x0"].calls) == 1  # the same read in both rounds shows once
    singles = single_call_groups(groups)
    assert [g.calls for g in singles if g.exploration_id == "x2"] == [[c] for c in by_id["x2"].calls]
    assert {g.exploration_id for g in singles} == {"x2"}  # groups of one call are not repeated
    assert len({g.group_id for g in singles} | {g.group_id for g in groups}) == len(singles) + len(groups)
    # A call that is the explored task's whole solution would only give that task back: not alone.
    x2 = by_id["x2"]
    transfer = ToolCall(name="transfer", arguments=x2.calls[1]["arguments"])
    solved = replace(x2, task=x2.task.model_copy(update={"solution": [[transfer]]}))
    assert [g.calls for g in single_call_groups([solved])] == [[x2.calls[0]], [x2.calls[2]]]
