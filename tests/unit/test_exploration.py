"""Exploration (step 3) on the real tool world with a scripted teacher: every reflection outcome as a row
(ok / unparsable / invalid / error), episodes under the context and past the request, signal selection."""

from __future__ import annotations

import json

from coevolve.stages.explore.exploration import (
    Target,
    exploration_artifacts,
    exploration_task,
    explore,
    select_signals,
)
from coevolve.stages.triples.grouping import build_triples
from tests.fakes.teacher import ScriptedTeacher
from tests.unit.evolution_world import VALID, family, make_env


def test_explore_records_every_reflection_outcome(explored):
    rows = {r["exploration_id"]: r for r in explored.artifacts["explorations"]}
    assert [rows[f"x{i}"]["status"] for i in range(6)] == ["ok", "ok", "ok", "unparsable", "invalid", "error"]
    assert (
        rows["x3"]["reflection"] == "I think the agent should try harder." and rows["x3"]["context"] is None
    )
    assert rows["x3"]["reason"] == "no JSON object in the reply"
    assert rows["x4"]["reason"] == "the context has no 'plan' text"
    assert "no user turns" in rows["x5"]["reason"] and rows["x5"]["reflection"] is None
    context = json.loads(rows["x0"]["context"])
    assert context["tools"] == ["get_balance"] and context["unknown_tools"] == ["teleport"]
    assert [len(json.loads(rows[f"x{i}"]["trajectory_ids"])) for i in range(6)] == [2, 2, 2, 0, 0, 0]
    # the reflection prompt showed the task; the episodes ran under the context, from the task's state
    assert explored.targets[0].task.turns[0] in explored.teacher.prompts[0]
    trajectories = explored.artifacts["trajectories"]
    assert {t["source"] for t in trajectories} == {"explore"} and len(trajectories) == 6
    first = json.loads(trajectories[0]["messages"])
    assert first[0]["role"] == "system" and "read, then act" in first[0]["content"]
    assert all(t["success"] for t in trajectories)  # the oracle explorer solves the task it starts from


def test_select_signals_orders_by_kind_then_newest_and_dedupes_tasks():
    signals = [
        {"signal_id": "a", "kind": "rare", "task_id": "t1", "trajectory_round": 5},
        {"signal_id": "b", "kind": "boundary", "task_id": "t1", "trajectory_round": 3},
        {"signal_id": "c", "kind": "boundary", "task_id": "t2", "trajectory_round": 4},
        {"signal_id": "d", "kind": "forgetting", "task_id": "t3", "trajectory_round": 2},
        {"signal_id": "e", "kind": "boundary", "task_id": "t4", "trajectory_round": 4},
    ]
    chosen = select_signals(signals, ("forgetting", "boundary", "rare"), 3)
    assert [s["signal_id"] for s in chosen] == ["d", "c", "e"]
    assert [s["signal_id"] for s in select_signals(signals, ("rare", "boundary"), 10)] == ["a", "c", "e"]


def test_select_signals_breaks_ties_by_task_and_sample_not_by_run_dependent_ids():
    """Two runs of one seed hold the same signals under different ids (ids hash the run's name): both must
    explore the same trajectory."""
    def signals(ids):
        return [{"signal_id": i, "kind": "boundary", "task_id": t, "trajectory_round": 0, "sample": k}
                for i, (t, k) in zip(ids, [("t2", 3), ("t2", 1), ("t1", 5)], strict=True)]

    for ids in (["a", "b", "c"], ["z", "y", "x"]):
        chosen = select_signals(signals(ids), ("boundary",), 1)
        assert [(s["task_id"], s["sample"]) for s in chosen] == [("t1", 5)]
        chosen = select_signals([s for s in signals(ids) if s["task_id"] == "t2"], ("boundary",), 1)
        assert [(s["task_id"], s["sample"]) for s in chosen] == [("t2", 1)]


def test_an_exploration_goes_on_past_the_request_and_its_replay_follows_it(tokenizer, world):
    task = family(world.train, "bank_balance")
    teacher = ScriptedTeacher(tokenizer, world.train, reflections=[VALID])
    (x,) = explore(teacher, make_env, [Target("x", task, "boundary")], rounds=1, steps=6, seed=0, follow_ups=1)
    (episode,) = x.episodes
    follow_up = exploration_task(task, 1).turns[1]
    assert follow_up.startswith("Now explore beyond that request")
    assert [m["content"] for m in episode.messages if m["role"] == "user"][-1] == follow_up
    calls = [(s["turn"], s["tool"]) for s in episode.steps if s["kind"] == "call"]
    assert calls[0] == (0, "get_balance") and {turn for turn, _ in calls} == {0, 1}  # the request, then beyond
    artifacts = exploration_artifacts([x], run="t", round_=3, teacher=teacher.version)
    triples = build_triples(make_env, artifacts["explorations"], artifacts["steps"])
    assert [(r["turn"], r["tool"]) for r in triples] == calls
    assert all(r["ok"] and r["state_after"] is not None for r in triples)  # the replay ran the follow-up too
