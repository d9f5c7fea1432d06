"""Abstraction (step 5) with a scripted teacher: ok / unparsable / invalid / duplicate candidate rows,
samples per group, reply prefixes, and the similarity behind duplicates."""

from __future__ import annotations

import json

from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.stages.abstract.abstraction import Group, abstract_groups, repair_answers
from coevolve.stages.abstract.prompting import ABSTRACT_PREFIX, abstract_prefix
from coevolve.stages.abstract.questions import question_prefix
from coevolve.stages.abstract.similarity import jaccard, solution_signature
from tests.fakes.teacher import ScriptedTeacher
from tests.unit.evolution_world import family, make_env


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


def test_prefill_question_opens_a_read_only_calls_task_as_a_question_naming_its_values(tokenizer, world):
    """A read-only call that takes arguments: its solution and a query opened as a question naming its
    values are written for the teacher, alone or after the listing whose result shows them; other groups
    keep their start, and the default is unchanged."""
    bank = family(world.train, "bank_balance")
    (a, info_a), (b, _) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    read = _group(bank, [("get_balance", {"account_id": a})], "read")
    listed = _group(bank, [("list_accounts", {}), ("transfer", {"from_account": a, "to_account": b, "amount": 5.0}),
                           ("get_balance", {"account_id": a})], "listed")  # fmt: skip
    move = _group(bank, [("transfer", {"from_account": a, "to_account": b, "amount": 5.0})], "move")
    opened = f'"query": "Look up the balance {a} and tell me the '
    assert question_prefix(read.calls) == ABSTRACT_PREFIX + "0], " + opened
    assert question_prefix(listed.calls) == ABSTRACT_PREFIX + "0, 2], " + opened  # the listing showed the id
    assert question_prefix(move.calls) is None and question_prefix(listed.calls[:2]) is None
    answer = f"{info_a['balance']:.2f}"

    class PrefixEchoTeacher(ScriptedTeacher):  # fake: continues each prefix with a task for its group
        def complete(self, conversations, sampling, *, reply_prefix=""):
            self.batches = [*getattr(self, "batches", []), reply_prefix]
            rest = f'balance.", "answers": ["{answer}"]}}]' if reply_prefix.endswith("tell me the ") else (
                f'Transfer 5.00 from {a} to {b}."}}]')
            return [reply_prefix + rest] * len(conversations)

    teacher = PrefixEchoTeacher(tokenizer, [])
    rows = abstract_groups(teacher, make_env, [read, listed, move], env="toolworld", max_tasks=3,
                           duplicate_jaccard=0.8, existing=[], seed=0, prefill_effect=True,
                           prefill_question=True)  # fmt: skip
    assert [(r["group_id"], r["query"], [c["name"] for c in json.loads(r["solution"])]) for r in rows] == [
        ("read", f"Look up the balance {a} and tell me the balance.", ["get_balance"]),
        ("listed", f"Look up the balance {a} and tell me the balance.", ["list_accounts", "get_balance"]),
        ("move", f"Transfer 5.00 from {a} to {b}.", ["transfer"])]  # fmt: skip
    assert json.loads(rows[0]["answers"]) == [answer]
    teacher = PrefixEchoTeacher(tokenizer, [])
    abstract_groups(teacher, make_env, [read], env="toolworld", max_tasks=3, duplicate_jaccard=0.8, existing=[],
                    seed=0, prefill_effect=True)  # fmt: skip
    assert teacher.batches == [ABSTRACT_PREFIX + '0], "answers": ["']  # without it: `prefill_effect`'s start
    spaced = [{"tool": "search_files", "arguments": {"text": ' send "invoice"'}, "observation": "", "changed": False}]
    assert question_prefix(spaced).endswith('Look up the files \'send \\"invoice\\"\' and tell me the ')
