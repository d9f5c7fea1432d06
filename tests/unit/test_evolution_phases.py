"""Data-evolution phases on the real tool world with a scripted teacher: every outcome, as rows.

explore (ok / unparsable / invalid / error), triples (replayed state digests), abstract (ok /
unparsable / invalid / duplicate), verify (accept / retain / discard for zero reward, replay failure, no
effect, unsolvable, contamination) and merge (admission and weights).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.replay import replay_reference
from coevolve.evolution.abstraction import (
    Group,
    abstract_groups,
    build_groups,
    repair_answers,
    single_call_groups,
)
from coevolve.evolution.candidates import candidate_task
from coevolve.evolution.exploration import Target, exploration_artifacts, explore, select_signals
from coevolve.evolution.merging import admitted_tasks, merge_dataset, solved_shares
from coevolve.evolution.prompts import abstract_prefix
from coevolve.evolution.queries import query_literals
from coevolve.evolution.similarity import jaccard, solution_signature
from coevolve.evolution.triples import build_triples, group_id
from coevolve.evolution.verification import VerifySettings, verify_candidates
from coevolve.storage.datasets import sample_task_ids
from tests.fakes.teacher import OracleEngine, ScriptedTeacher

ENV_OPTIONS = {"seed": 0, "n_train": 40, "n_test": 8, "n_heldout": 8}


def make_env():
    return envs.make("toolworld", **ENV_OPTIONS)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from coevolve.llm.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))


@pytest.fixture(scope="module")
def world():
    env = make_env()
    return SimpleNamespace(train=env.tasks("train"), test=env.tasks("test"))


def family(tasks: list[Task], name: str) -> Task:
    return next(t for t in tasks if t.family == name)


# --- explore ------------------------------------------------------------------------------------

VALID = json.dumps(
    {"tools": ["get_balance", "teleport"], "apps": ["bank"], "diagnosis": "d", "plan": "read, then act"}
)


@pytest.fixture(scope="module")
def explored(tokenizer, world):
    tasks = [
        family(world.train, f)
        for f in ("bank_balance", "send_message", "balance_then_transfer", "file_lookup", "write_note")
    ]
    broken = tasks[0].model_copy(update={"id": "broken", "turns": []})
    targets = [Target(f"x{i}", t, "boundary", f"s{i}", f"t{i}") for i, t in enumerate([*tasks, broken])]
    teacher = ScriptedTeacher(
        tokenizer,
        world.train,
        reflections=[
            VALID,
            VALID,
            VALID,
            "I think the agent should try harder.",
            '{"tools": ["get_balance"]}',
        ],
    )
    explorations = explore(teacher, make_env, targets, rounds=2, steps=6, seed=0)
    artifacts = exploration_artifacts(explorations, run="t", round_=3, teacher=teacher.version)
    return SimpleNamespace(targets=targets, explorations=explorations, artifacts=artifacts, teacher=teacher)


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


# --- triples ------------------------------------------------------------------------------------


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


def test_an_exploration_goes_on_past_the_request_and_its_replay_follows_it(tokenizer, world):
    from coevolve.evolution.exploration import exploration_task

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


# --- abstract -----------------------------------------------------------------------------------


def _group(task: Task, calls: list[tuple[str, dict]], gid: str) -> Group:
    env = make_env()
    env.reset(task)
    observed = []
    for name, arguments in calls:
        before = env.state_digest()
        result = env.step([ToolCall(name=name, arguments=arguments)])
        observed.append({"tool": name, "arguments": arguments, "observation": result.messages[0]["content"],
                         "changed": env.state_digest() != before})  # fmt: skip
    return Group(gid, f"x-{gid}", task, observed)


def test_abstract_rows_cover_ok_unparsable_invalid_and_duplicate(tokenizer, world):
    bank = family(world.train, "bank_balance")
    account, info = next(iter(bank.initial_state["bank"]["accounts"].items()))
    balance = f"{info['balance']:.2f}"
    g1 = _group(bank, [("get_balance", {"account_id": account})], "g1")
    g2 = _group(family(world.train, "send_message"), [], "g2")  # nothing succeeded
    g3 = _group(bank, [("get_balance", {"account_id": account})], "g3")
    ok = {
        "intent": "read",
        "query": f"What is the balance of account {account}?",
        "solution": [0],
        "answers": [balance],
    }
    reply_1 = json.dumps(
        [
            ok,
            {**ok, "query": f"What is the balance of the account {account}?"},  # near-duplicate (Jaccard 0.9)
            {"query": "", "solution": [0]},
            {"query": "Move money", "solution": [{"name": "transfer", "arguments": {"amount": 5}}]},
            {"query": "Out of range", "solution": [3]},
            {"query": bank.turns[0], "solution": [0], "answers": [balance]},  # duplicate of the dataset task
            {"query": "Sixth", "solution": [0]},
        ]
    )
    scripted = {"g1": "Here are the tasks:\n" + reply_1, "g3": "Sorry, I cannot produce tasks."}
    teacher = ScriptedTeacher(
        tokenizer,
        [],
        abstractions=lambda prompt: scripted[
            "g1" if "OBSERVED CALLS" in prompt and len(teacher.prompts) == 1 else "g3"
        ],
    )
    rows = abstract_groups(
        teacher,
        make_env,
        [g1, g2, g3],
        env="toolworld",
        max_tasks=6,
        duplicate_jaccard=0.8,
        existing=[bank],
        seed=0,
    )
    got = [(r["group_id"], r["status"], r["reason"]) for r in rows]
    assert got == [
        ("g1", "ok", None),
        ("g1", "duplicate", f"near-duplicate of {rows[0]['candidate_id']}"),
        ("g1", "invalid", "'query' must be non-empty text"),
        ("g1", "invalid", 'solution call transfer({"amount": 5.0}) was not observed'),
        ("g1", "invalid", "solution item 3 is neither an observed call index nor a call"),
        ("g1", "duplicate", f"near-duplicate of {bank.id}"),
        ("g1", "invalid", "more than 6 tasks per group"),
        ("g2", "invalid", "no successful call in the group"),
        ("g3", "unparsable", "no JSON array in the reply"),
    ]
    first = rows[0]
    assert json.loads(first["solution"]) == [{"name": "get_balance", "arguments": {"account_id": account}}]
    assert json.loads(first["answers"]) == [balance] and first["raw_reply"] == scripted["g1"]
    assert rows[-1]["raw_reply"] == scripted["g3"]
    assert len({r["candidate_id"] for r in rows}) == len(rows)
    again = abstract_groups(
        ScriptedTeacher(tokenizer, [], abstractions=[reply_1]),
        make_env,
        [g1],
        env="toolworld",
        max_tasks=6,
        duplicate_jaccard=0.8,
        existing=[],
        seed=0,
    )
    assert again[0]["candidate_id"] == first["candidate_id"]  # content hash: same content, same id


def test_several_abstraction_samples_per_group_are_parsed_once_each(tokenizer, world):
    bank = family(world.train, "bank_balance")
    account, info = next(iter(bank.initial_state["bank"]["accounts"].items()))
    group = _group(bank, [("get_balance", {"account_id": account})], "g1")
    task = {"query": f"What is the balance of {account}?", "solution": [0], "answers": [f"{info['balance']:.2f}"]}
    replies = [json.dumps([task]), json.dumps([task]), "no JSON here"]
    teacher = ScriptedTeacher(tokenizer, [], abstractions=replies)
    rows = abstract_groups(teacher, make_env, [group], env="toolworld", max_tasks=3, duplicate_jaccard=0.8,
                           existing=[], seed=0, samples=3)  # fmt: skip
    assert len(teacher.prompts) == 3  # one batch of three replies to the same prompt
    assert [(r["status"], r["raw_reply"]) for r in rows] == [("ok", replies[0]), ("unparsable", replies[2])]


def test_a_one_call_group_gets_its_only_solution_written_for_the_teacher(tokenizer, world):
    from coevolve.evolution.prompts import ABSTRACT_PREFIX

    bank = family(world.train, "bank_balance")
    (a, info_a), (b, info_b) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    one = _group(bank, [("get_balance", {"account_id": a})], "one")
    two = _group(bank, [("get_balance", {"account_id": a}), ("get_balance", {"account_id": b})], "two")

    class PrefixEchoTeacher(ScriptedTeacher):  # fake: continues each prefix with a task for its group
        def complete(self, conversations, sampling, *, reply_prefix=""):
            self.batches = [*getattr(self, "batches", []), (reply_prefix, len(conversations))]
            rest = {ABSTRACT_PREFIX: f'1], "answers": ["{info_b["balance"]:.2f}"], "query": "Balance of {b}?"}}]',
                    ABSTRACT_PREFIX + '0], "answers": [': f'"{info_a["balance"]:.2f}"], "query": "Balance of {a}?"}}]'}
            return [reply_prefix + rest[reply_prefix]] * len(conversations)

    teacher = PrefixEchoTeacher(tokenizer, [])
    rows = abstract_groups(teacher, make_env, [two, one], env="toolworld", max_tasks=3, duplicate_jaccard=0.8,
                           existing=[], seed=0, samples=2)  # fmt: skip
    assert teacher.batches == [(ABSTRACT_PREFIX, 2), (ABSTRACT_PREFIX + '0], "answers": [', 2)]
    assert [(r["group_id"], r["status"], r["query"]) for r in rows] == [
        ("two", "ok", f"Balance of {b}?"), ("one", "ok", f"Balance of {a}?")]  # fmt: skip
    assert rows[1]["raw_reply"].startswith('[{"solution": [0], "answers": [')


def test_prefill_effect_starts_a_one_call_reply_by_what_the_call_did(tokenizer, world):
    """A read-only call's task must ask for what it read (answers opened), a state change's is an instruction
    (no answers, the query next); groups of several calls and the default are unchanged."""
    from coevolve.evolution.prompts import ABSTRACT_PREFIX

    bank = family(world.train, "bank_balance")
    (a, info_a), (b, _) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    read = _group(bank, [("get_balance", {"account_id": a})], "read")
    move = _group(bank, [("transfer", {"from_account": a, "to_account": b, "amount": 5.0})], "move")
    both = _group(bank, [("get_balance", {"account_id": a}), ("get_balance", {"account_id": b})], "both")
    assert [read.calls[0]["changed"], move.calls[0]["changed"]] == [False, True]
    continuation = {
        ABSTRACT_PREFIX + '0], "answers": ["': f'{info_a["balance"]:.2f}"], "query": "What is the balance of {a}?"}}]',
        ABSTRACT_PREFIX + '0], "answers": [], "query": "': f'Transfer 5.00 from {a} to {b}."}}]',
        ABSTRACT_PREFIX: f'1], "answers": [], "query": "Balance of {b}?"}}]',
    }

    class PrefixEchoTeacher(ScriptedTeacher):  # fake: continues each prefix with a task for its group
        def complete(self, conversations, sampling, *, reply_prefix=""):
            self.batches = [*getattr(self, "batches", []), reply_prefix]
            return [reply_prefix + continuation[reply_prefix]] * len(conversations)

    teacher = PrefixEchoTeacher(tokenizer, [])
    rows = abstract_groups(teacher, make_env, [read, move, both], env="toolworld", max_tasks=3,
                           duplicate_jaccard=0.8, existing=[], seed=0, prefill_effect=True)  # fmt: skip
    assert sorted(teacher.batches) == sorted(continuation)
    assert [(r["group_id"], r["status"], json.loads(r["answers"])) for r in rows] == [
        ("read", "ok", [f"{info_a['balance']:.2f}"]), ("move", "ok", []), ("both", "ok", [])]  # fmt: skip
    assert abstract_prefix(read.calls) == abstract_prefix(move.calls) == ABSTRACT_PREFIX + '0], "answers": ['
    unknown = [{**read.calls[0], "changed": None}]  # an environment without state digests
    assert abstract_prefix(unknown, by_effect=True) == ABSTRACT_PREFIX + '0], "answers": ['


def test_duplicate_jaccard_zero_makes_the_solution_alone_decide(tokenizer, world):
    """Two wordings of one solution: distinct tasks at the default 0.8, one task at 0."""
    bank = family(world.train, "bank_balance")
    account, info = next(iter(bank.initial_state["bank"]["accounts"].items()))
    group = _group(bank, [("get_balance", {"account_id": account})], "g1")
    answer = f"{info['balance']:.2f}"
    reply = json.dumps([
        {"query": f"What is the balance of {account}?", "solution": [0], "answers": [answer]},
        {"query": f"Tell me how much money account {account} holds right now.", "solution": [0], "answers": [answer]},
    ])  # fmt: skip

    def statuses(threshold: float) -> list[str]:
        rows = abstract_groups(ScriptedTeacher(tokenizer, [], abstractions=[reply]), make_env, [group],
                               env="toolworld", max_tasks=3, duplicate_jaccard=threshold, existing=[], seed=0)  # fmt: skip
        return [r["status"] for r in rows]

    assert statuses(0.8) == ["ok", "ok"]
    assert statuses(0.0) == ["ok", "duplicate"]


def test_an_answers_list_that_is_not_json_is_read_as_empty(tokenizer, world):
    """A small teacher writes `"answers": [16:00]`: the array does not decode, and the first list that does
    is the solution `[0]` ("a task must be a JSON object, got int"). Emptied, the task is checked."""
    event = family(world.train, "create_event")
    (call,) = event.solution[0]
    group = _group(event, [(call.name, call.arguments)], "g1")
    broken = ('[{"solution": [0], "answers": [16:00], "query": "Add it.", "intent": "e"}, '
              '{"solution": [0], "answers": ["x"], "query": "Add it now.", "intent": "e"}]')  # fmt: skip
    rows = abstract_groups(ScriptedTeacher(tokenizer, [], abstractions=[broken]), make_env, [group],
                           env="toolworld", max_tasks=3, duplicate_jaccard=0.8, existing=[], seed=0)  # fmt: skip
    assert [(r["status"], r["answers"]) for r in rows] == [("ok", "[]"), ("ok", '["x"]')]
    assert rows[0]["reason"] == "an 'answers' list of the reply was not JSON and was read as empty"
    assert rows[0]["raw_reply"] == broken  # the row keeps what the teacher wrote
    whole = '[{"solution": [0], "answers": ["16:00"], "query": "Add it.", "intent": "e"}]'
    assert repair_answers(whole) == whole and repair_answers('"answers": [a=1, [b]]') == '"answers": [a=1, [b]]'


def test_similarity_helpers():
    assert (
        solution_signature([{"name": "f", "arguments": {"b": " X  Y", "a": 1}}])
        == 'f({"a": 1.0, "b": "x y"})'
    )
    assert jaccard("What is the balance of SAV-2?", "what is THE balance of sav-2") == 1.0
    assert jaccard("a b", "c d") == 0.0


# --- verify -------------------------------------------------------------------------------------


def candidate(
    task: Task, query: str, calls: list[dict], answers: list[str], cid: str, status: str = "ok"
) -> dict:
    return {
        "candidate_id": cid,
        "group_id": f"g-{cid}",
        "exploration_id": "x-signal",
        "task_id": task.id,
        "env": "toolworld",
        "status": status,
        "query": query,
        "solution": json.dumps(calls),
        "answers": json.dumps(answers),
        "initial_state": json.dumps(task.initial_state),
    }


@pytest.fixture(scope="module")
def verified(tokenizer, world):
    bank, messages = family(world.train, "bank_balance"), family(world.train, "send_message")
    (acc_a, a), (acc_b, b) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    contact = next(iter(messages.initial_state["messages"]["contacts"]))
    held = family(world.test, "send_message")
    rows = [
        candidate(
            bank,
            f"What is the balance of {acc_a}?",
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [f"{a['balance']:.2f}"],
            "accept",
        ),
        candidate(
            bank,
            f"Move 5 from {acc_a} to {acc_b}, then tell me the new balance of {acc_b}.",  # the fake policy
            [{"name": "transfer", "arguments": {"from_account": acc_a, "to_account": acc_b, "amount": 5}},
             {"name": "get_balance", "arguments": {"account_id": acc_b}}],  # moves it, states no balance
            [f"{b['balance'] + 5:.2f}"],
            "retain",
        ),
        candidate(
            bank,
            f"How much is in {acc_b}?",  # the fake policy reads the balance but does not state it
            [{"name": "get_balance", "arguments": {"account_id": acc_b}}],
            [f"{b['balance']:.2f}"],
            "called",
        ),
        candidate(
            bank,
            f"Tell me the balance of {acc_b}.",  # the fake policy gives up: what an idle answer earns
            [{"name": "get_balance", "arguments": {"account_id": acc_b}}],
            [f"{b['balance']:.2f}"],
            "idle",
        ),
        candidate(
            messages,
            f"Text {contact}: 'see you at noon'",
            [{"name": "send_message", "arguments": {"to": contact, "text": "see you at noon"}}],
            [],
            "zero",
        ),
        candidate(
            bank,
            f"Read {acc_a}.",  # no answer named: the balance it reads becomes the answer
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [],
            "read",
        ),
        candidate(
            bank,
            "Show me my accounts.",
            [{"name": "list_accounts", "arguments": {}}],
            [],
            "noeffect",
        ),
        candidate(
            bank,
            f"Transfer 125.39 from {acc_a} to {acc_b}.",  # a small teacher's mismatched pair
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [],
            "instruction",
        ),
        candidate(
            bank,
            f"Move 5 from {acc_a} to {acc_b}.",  # the same with the balance it reads named as the answer
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [str(a["balance"])],
            "named",
        ),
        candidate(
            bank,
            f"Move 5 from {acc_a} to {acc_b} and tell me the balance of {acc_a}.",  # asks, and for an action
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [str(a["balance"])],
            "action",
        ),
        candidate(
            bank,
            f"What is the balance of {acc_a} once 125.39 went to {acc_b}?",  # asks, but not what it reads
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [],
            "ungrounded",
        ),
        candidate(
            messages,
            f"Thank {contact}.",
            [{"name": "send_message", "arguments": {"to": contact, "text": "Thanks a lot"}}],
            [],
            "unsolvable",
        ),
        candidate(bank, "Teleport me.", [{"name": "teleport", "arguments": {}}], [], "badcall"),
        candidate(
            held, held.turns[0] + " Please.", [c.model_dump() for c in held.solution[0]], [], "contaminated"
        ),
        candidate(bank, "ignored", [], [], "unparsable", status="unparsable"),
    ]
    known, half_known = candidate_task(make_env(), rows[0]), [candidate_task(make_env(), {**r, "answers": "[]"}) for r in rows[1:3]]
    policy = SimpleNamespace(engine=OracleEngine(tokenizer, [known, *half_known]), version="policy-v1")
    from coevolve.llm.chat import ChatFormat

    policy.chat = ChatFormat(tokenizer)
    lineage = {"x-signal": {"signal_id": "sig-1", "trajectory_id": "traj-1", "signal_kind": "boundary"}}
    out = verify_candidates(
        policy, make_env, rows, world.test, lineage, VerifySettings(attempts=2), run="t", round_=3
    )
    return SimpleNamespace(
        rows=rows,
        out=out,
        by_candidate={v["candidate_id"]: v for v in out["verifications"]},
        accounts=(acc_a, acc_b),
        balance_a=a["balance"],
    )


def test_an_answer_read_off_another_object_than_the_query_names_is_a_misread(world):
    from coevolve.evolution.checks import Rejected, check_candidate

    bank = family(world.train, "bank_balance")
    (acc_a, a), (acc_b, b) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    listing = [{"name": "list_accounts", "arguments": {}}]
    question = f"What is the balance of account {acc_b}?"
    with pytest.raises(Rejected, match=f"^misread: answer {a['balance']:.2f} is another object's value"):
        check_candidate(make_env, candidate(bank, question, listing, [f"{a['balance']:.2f}"], "misread"), [],
                        VerifySettings())  # fmt: skip
    checked = check_candidate(make_env, candidate(bank, question, listing, [f"{b['balance']:.2f}"], "read"), [],
                              VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[f"{b['balance']:.2f}"]]
    # a query naming no one object of the listing leaves its answers alone
    checked = check_candidate(make_env, candidate(bank, "Which account holds the most money?", listing,
                                                  [f"{a['balance']:.2f}"], "unnamed"), [], VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[f"{a['balance']:.2f}"]]


def test_a_text_answer_the_query_states_is_leaked_and_a_number_is_left_alone(world):
    from coevolve.evolution.checks import Rejected, check_candidate

    lookup = family(world.train, "file_lookup")
    path, text = next(iter(lookup.initial_state["files"]["files"].items()))
    value = text.split(": ")[-1]
    read = [{"name": "read_file", "arguments": {"path": path}}]
    with pytest.raises(Rejected, match=f"^leaked: answer {value} is stated in the query"):
        check_candidate(make_env, candidate(lookup, f"Read {path} and tell me the code: {value}.", read, [value],
                                            "leaked"), [], VerifySettings())  # fmt: skip
    checked = check_candidate(make_env, candidate(lookup, f"Read {path} and tell me the code.", read, [value],
                                                  "asked"), [], VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[value]]
    bank = family(world.train, "bank_balance")
    account, state = next(iter(bank.initial_state["bank"]["accounts"].items()))
    balance = f"{state['balance']:.2f}"
    reads = [{"name": "get_balance", "arguments": {"account_id": account}}]
    checked = check_candidate(make_env, candidate(bank, f"Is the balance of {account} still {balance}? Tell me it.",
                                                  reads, [balance], "number"), [], VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[balance]]


def test_a_discarded_candidate_hands_over_to_its_sibling_duplicates(tokenizer, world):
    """The first wording of a solution is discarded (an instruction over a read): the next duplicate of
    it is checked in its place and stands for the solution; later ones and duplicates of a dataset task
    are left alone; a solution whose every wording fails leaves a discard row per wording."""
    from coevolve.llm.chat import ChatFormat

    bank = family(world.train, "bank_balance")
    (acc_a, a), (acc_b, _) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    read = [{"name": "get_balance", "arguments": {"account_id": acc_a}}]
    listing = [{"name": "list_accounts", "arguments": {}}]

    def duplicate(query: str, calls: list[dict], cid: str, of: str) -> dict:
        return {**candidate(bank, query, calls, [], cid, status="duplicate"), "duplicate_of": of}

    rows = [
        candidate(bank, f"Transfer 125.39 from {acc_a} to {acc_b}.", read, [], "mismatched"),
        candidate(bank, f"Transfer 9 from {acc_a} to {acc_b}.", listing, [], "listing"),
        duplicate(f"What is the balance of {acc_a}?", read, "sibling", "mismatched"),
        duplicate(f"Show me the balance of {acc_a}.", read, "later", "mismatched"),
        duplicate(f"Send 9 from {acc_b} to {acc_a}.", listing, "also-mismatched", "listing"),
        duplicate(f"Send 9 from {acc_b} to {acc_a}.", listing, "also-mismatched", "listing"),  # another reply's
        duplicate(f"Balance of {acc_a}?", read, "of-dataset", bank.id),
    ]
    known = candidate_task(make_env(), {**rows[2], "answers": json.dumps([f"{a['balance']:.2f}"])})
    policy = SimpleNamespace(engine=OracleEngine(tokenizer, [known]), version="p", chat=ChatFormat(tokenizer))
    out = verify_candidates(policy, make_env, rows, [], {}, VerifySettings(attempts=1), run="t", round_=0)
    verdicts = {v["candidate_id"]: v for v in out["verifications"]}
    assert len(verdicts) == len(out["verifications"])  # each wording checked once
    assert {cid: v["outcome"] for cid, v in verdicts.items()} == {
        "mismatched": "discard", "sibling": "accept", "listing": "discard", "also-mismatched": "discard"}  # fmt: skip
    assert all(verdicts[cid]["reason"].startswith("no effect") for cid in ("mismatched", "listing", "also-mismatched"))
    assert [t["task_id"] for t in out["trajectories"]] == [known.id]  # one policy attempt, for the stand-in


def test_verify_outcomes(verified):
    v = verified.by_candidate
    assert set(v) == {
        "accept", "retain", "called", "idle", "zero", "read", "noeffect", "instruction", "named", "action",
        "ungrounded", "unsolvable", "badcall", "contaminated",
    }  # fmt: skip
    assert (v["accept"]["outcome"], v["accept"]["reward"], v["accept"]["success"]) == ("accept", 1.0, True)
    # part of the task done (the transfer, not the balance asked for): retained
    assert v["retain"]["outcome"] == "retain" and 0 < v["retain"]["reward"] < 0.5
    assert v["retain"]["reason"].startswith("the policy failed having done part of the task: progress 0.50 above "
                                            "an idle answer's 0.00")  # fmt: skip
    # a call that ran and parsed earns shaping credit, and giving up the shaped reward's floor: neither
    # is any more of the task done than by an idle answer, so neither is retained
    assert (v["called"]["outcome"], v["idle"]["outcome"]) == ("discard", "discard")
    assert v["called"]["reward"] > v["idle"]["reward"] == pytest.approx(0.175)
    assert v["idle"]["reason"] == ("the policy failed doing no more of the task than an idle answer: progress "
                                   "0.50, idle 0.50 (best of 2; reward 0.17)")  # fmt: skip
    assert (v["zero"]["outcome"], v["zero"]["reward"]) == ("discard", 0.0)
    assert v["zero"]["reason"] == "the policy failed with zero reward (2 attempts)"
    assert v["noeffect"]["reason"].startswith("no effect") and "new values (at most 3" in v["noeffect"]["reason"]
    for name in ("instruction", "named"):
        assert v[name]["reason"].startswith("no effect") and "asks neither a question" in v[name]["reason"]
    assert v["action"]["reason"].startswith("no effect: the solution changes nothing, but the query asks for "
                                            "an action ('Move'")  # fmt: skip
    assert v["ungrounded"]["reason"] == (
        f"ungrounded: the query names 125.39, {verified.accounts[1]}, which the solution neither uses nor "
        "reads (1 of 3 literals grounded)"
    )
    assert v["unsolvable"]["reason"].startswith("unsolvable: argument Thanks a lot of send_message")
    assert v["badcall"]["reason"].startswith("replay: reference call teleport() failed")
    assert v["contaminated"]["reason"].startswith("contamination: near-duplicate of held-out task")
    for name in ("noeffect", "instruction", "named", "action", "ungrounded", "unsolvable", "badcall",
                 "contaminated"):  # fmt: skip
        assert v[name]["outcome"] == "discard" and v[name]["attempts"] == 0 and v[name]["task"] is None


def test_an_instruction_is_checked_without_the_answers_nobody_asked_for(world):
    from coevolve.evolution.checks import Rejected, check_candidate

    bank = family(world.train, "bank_balance")
    a, b = list(bank.initial_state["bank"]["accounts"])[:2]
    transfer = [{"name": "transfer", "arguments": {"from_account": a, "to_account": b, "amount": 5.0}}]
    env = make_env()
    env.reset(bank)
    left = str(env.step([ToolCall(**transfer[0])]).info["calls"][0]["result"]["from_balance"])
    # the teacher named the balance the transfer returned, which the query never asks for
    told = candidate(bank, f"Transfer 5 from {a} to {b}.", transfer, [left], "told")
    checked = check_candidate(make_env, told, [], VerifySettings())
    assert checked.task.checker["answers"] == [[]] and checked.dropped_answers == (left,)
    asked = candidate(bank, f"Transfer 5 from {a} to {b}, then tell me what is left in {a}.", transfer, [left],
                      "asked")  # fmt: skip
    checked = check_candidate(make_env, asked, [], VerifySettings())
    assert checked.task.checker["answers"] == [[left]] and checked.dropped_answers == ()
    # an answer no result shows is dropped before the checker's derivation could reject the task for it
    unseen = candidate(bank, f"Transfer 5 from {a} to {b}.", transfer, ["1631.1"], "unseen")
    checked = check_candidate(make_env, unseen, [], VerifySettings())
    assert checked.task.checker["answers"] == [[]] and checked.dropped_answers == ("1631.1",)
    with pytest.raises(Rejected, match="^replay: answers"):  # a question keeps its answers: this one is wrong
        check_candidate(make_env, {**unseen, "query": f"Transfer 5 from {a} to {b}. What is left?"}, [],
                        VerifySettings())  # fmt: skip


def test_a_read_only_candidate_without_answers_asks_for_what_its_solution_reads(verified):
    row = verified.by_candidate["read"]
    assert json.loads(row["checker"])["answers"] == [[str(verified.balance_a)]]  # not the account it names
    assert (row["outcome"], row["attempts"]) == ("discard", 2)  # the fake policy does not know it: gives up
    assert row["reason"].endswith(f"answers read from the solution's last result: {verified.balance_a}")


@pytest.mark.parametrize(
    ("query", "asks"),
    [
        ("What is the booking reference in file /work/ideas.txt?", True),
        ("How much money is in account BIZ-7", True),
        ("Show me my accounts.", True),
        ("read /work/ideas.txt", True),
        ("Please tell me the balance of BIZ-7, thanks?", True),
        ("Please use get_balance with account_id 'BIZ-7'. Tell me the result.", True),
        ("Look at /work/ideas.txt, then show me the reference", True),
        ("Could you read /work/ideas.txt", True),
        ("Move 1751.46 from account BIZ-7 to account SAV-2.", False),
        ("Copy /work/ideas.txt at /work/ideas.txt.", False),
        ("Write the booking reference in /work/ideas.txt.", False),
        ("Showcase the file.", False),
    ],
)
def test_a_query_asks_for_information_or_for_an_action(query, asks):
    from coevolve.evolution.queries import asks_for_information

    assert asks_for_information(query) is asks


@pytest.mark.parametrize(
    ("query", "action"),
    [
        ("Buy 9 x P-435 and tell me the order total.", "Buy"),
        ("What is the balance of BIZ-7? Then please transfer 5 from BIZ-7 to SAV-2.", "transfer"),
        ("Make a copy of /work/a.txt at /work/b.txt.", "Make"),
        ("Check order O-12 and tell me its status.", None),
        ("Read the message from Priya and tell me which date they suggest.", None),
        ("What is the status of order O-12?", None),
    ],
)
def test_a_query_may_ask_for_an_action(query, action):
    from coevolve.evolution.queries import requested_action

    assert requested_action(query) == action


def test_tool_world_reference_tasks_ask_for_an_action_exactly_when_their_solution_changes_the_state():
    from coevolve.evolution.candidates import replay_solution
    from coevolve.evolution.queries import asks_for_information, requested_action

    tasks = [t for split in ("train", "test", "heldout-templates") for t in make_env().tasks(split)]
    read_only = changing = 0
    for task in [t for t in tasks if len(t.turns) == 1]:
        before, after, _ = replay_solution(make_env, task)
        if before == after:
            read_only += 1
            assert asks_for_information(task.turns[0]) and requested_action(task.turns[0]) is None, task.turns
        else:
            changing += 1
            assert requested_action(task.turns[0]) is not None, task.turns
    assert read_only and changing


def test_query_literals_are_numbers_identifiers_paths_and_quoted_text():
    query = "Transfer 125.39 from TRV-4 to BIZ-3. Write 'see you' to /work/a.txt, don't wait. At 10:00."
    assert query_literals(query) == ["125.39", "TRV-4", "BIZ-3", "see you", "/work/a.txt", "10", "00"]


def test_verify_admits_a_task_with_checker_lineage_and_attempt_trajectories(verified, world):
    row = verified.by_candidate["accept"]
    task = json.loads(row["task"])
    checker = json.loads(row["checker"])
    assert (
        row["task_id"] == task["task_id"]
        and task["source"] == "synthesized"
        and task["split"] == "synthesized"
    )
    assert set(checker) == {"final_state", "answers"}
    assert checker["answers"] == [json.loads(verified.rows[0]["answers"])]
    assert json.loads(task["lineage"]) == {
        "signal_id": "sig-1",
        "trajectory_id": "traj-1",
        "signal_kind": "boundary",
        "exploration_id": "x-signal",
        "group_id": "g-accept",
        "candidate_id": "accept",
        "verification_id": row["verification_id"],
    }
    assert row["expected_digest"]
    trajectories = verified.out["trajectories"]
    assert {t["source"] for t in trajectories} == {"verify"} and len(
        trajectories
    ) == 6 * 2  # 6 attempted, K=2
    # the admitted task is scored by its verifiable checker like any task
    synthesized = Task.from_row({**task})
    assert replay_reference(make_env(), synthesized).success
    env = make_env()
    env.reset(synthesized)
    env.step("I have no idea.")
    assert not env.evaluate().success


def test_no_verification_ablation_admits_every_parsed_candidate(verified, tokenizer):
    from coevolve.llm.chat import ChatFormat

    policy = SimpleNamespace(engine=None, chat=ChatFormat(tokenizer), version="policy-v1")
    out = verify_candidates(
        policy, make_env, verified.rows, [], {}, VerifySettings(verify=False), run="t", round_=3
    )
    by_candidate = {v["candidate_id"]: v for v in out["verifications"]}
    ok = {r["candidate_id"] for r in verified.rows if r["status"] == "ok"}
    assert set(by_candidate) == ok and out["trajectories"] == []
    assert all(v["outcome"] == "accept" and v["attempts"] == 0 for v in by_candidate.values())
    assert all(v["reason"].startswith("admitted without verification") for v in by_candidate.values())
    # tasks verification would have thrown out, e.g. one whose solution fails, now enter the dataset
    assert json.loads(by_candidate["badcall"]["task"])["source"] == "synthesized"
    assert json.loads(by_candidate["contaminated"]["task"])


# --- merge --------------------------------------------------------------------------------------


def test_merge_admits_configured_outcomes_once_with_weights(verified):
    verifications = verified.out["verifications"]
    both = admitted_tasks(verifications, ("accept", "retain"), known=set())
    only = admitted_tasks(verifications, ("accept",), known=set())
    assert [t["task_id"] for t in only] == [verified.by_candidate["accept"]["task_id"]]
    assert len(both) == 2
    assert (
        admitted_tasks(verifications + verifications, ("accept", "retain"), known={only[0]["task_id"]})
        == both[1:]
    )
    unlinked = {**both[1], "lineage": json.dumps({"exploration_id": "x"})}
    previous = [{"task_id": "seed", "weight": 2.0, "added_round": 0}]
    rows = merge_dataset(previous, [both[0], unlinked], version=4, signal_weight=3.0)
    assert rows == [
        {"task_id": "seed", "weight": 2.0, "added_round": 0, "dataset_version": 4},
        {"dataset_version": 4, "task_id": both[0]["task_id"], "weight": 3.0, "added_round": 4},
        {"dataset_version": 4, "task_id": unlinked["task_id"], "weight": 1.0, "added_round": 4},
    ]



def test_unsolved_weighting_scales_new_tasks_by_failed_attempts_and_never_draws_mastered_ones(verified):
    tasks = admitted_tasks(verified.out["verifications"], ("accept", "retain"), known=set())
    mastered, learnable = tasks[0]["task_id"], tasks[1]["task_id"]
    attempts = [{"task_id": mastered, "success": True}] * 4 + [
        {"task_id": learnable, "success": s} for s in (True, False, False, False)]  # fmt: skip
    solved = solved_shares(attempts)
    assert solved == {mastered: 1.0, learnable: 0.25}
    previous = [{"task_id": f"seed-{i}", "weight": 1.0, "added_round": 0} for i in range(20)]
    rows = merge_dataset(previous, tasks, version=1, signal_weight=8.0, solved=solved)
    weights = {r["task_id"]: r["weight"] for r in rows}
    assert weights[mastered] == 0.0 and weights[learnable] == 6.0 and weights["seed-0"] == 1.0
    # Unverified tasks (no attempts) keep their weight.
    assert merge_dataset([], tasks, version=1, signal_weight=8.0, solved={})[0]["weight"] == 8.0
    # The reserved draws go to the learnable task; the mastered one is never drawn.
    dataset = pa.Table.from_pylist([{k: r[k] for k in ("task_id", "weight", "added_round")} for r in rows])
    draws = [sample_task_ids(dataset, 4, random.Random(s), newest_share=0.5) for s in range(30)]
    assert all(learnable in ids and mastered not in ids and len(ids) == 4 for ids in draws)


def test_rollout_draws_reserve_a_share_for_the_newest_admitted_tasks():
    ids = [f"seed-{i}" for i in range(200)] + ["old"] + [f"new-{i}" for i in range(3)]
    dataset = pa.table({"task_id": ids, "weight": [1.0] * 200 + [40.0] * 4, "added_round": [0] * 200 + [1, 2, 2, 2]})
    plain = [sample_task_ids(dataset, 4, random.Random(s)) for s in range(50)]
    shared = [sample_task_ids(dataset, 4, random.Random(s), newest_share=0.5) for s in range(50)]
    assert any(sum(i.startswith("new") for i in ids) < 2 for ids in plain)
    assert all(sum(i.startswith("new") for i in ids) >= 2 and len(set(ids)) == 4 for ids in shared)
    # Without a merged task, and at share 0, the reserved draw is the plain weighted one.
    seeds_only = dataset.filter(pc.equal(dataset["added_round"], 0))
    assert sample_task_ids(seeds_only, 4, random.Random(3), newest_share=0.5) == sample_task_ids(
        seeds_only, 4, random.Random(3))
    assert sample_task_ids(dataset, 4, random.Random(3), newest_share=0.0) == plain[3]
    # "Newest" is the latest round that added any: round 1's task once round 2 added none.
    older = dataset.filter(pc.invert(pc.starts_with(dataset["task_id"], "new")))
    assert all("old" in sample_task_ids(older, 4, random.Random(s), newest_share=0.25) for s in range(20))


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
