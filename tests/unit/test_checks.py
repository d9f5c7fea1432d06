"""Verification's environment checks (`stages.verify.checks.CHECKS`), one test per named check, on hand-made
candidate rows against the real tool world; then whole candidates through `check_candidate`.

`draft_before(check, row)` runs the checks before `check` on a row, so each test sees the draft exactly as
verification would hand it over.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from coevolve.core import ToolCall
from coevolve.stages.abstract.similarity import task_signature
from coevolve.stages.verify.candidates import Rejected
from coevolve.stages.verify.checks import (
    CHECKS,
    CheckContext,
    Draft,
    answers_in_results,
    answers_not_leaked,
    answers_of_the_named_object,
    changing_is_asked_for,
    check_candidate,
    derive_task,
    drop_unasked_answers,
    grounded,
    has_effect,
    not_contaminated,
    read_only_asks_a_question,
    read_only_asks_no_action,
    read_only_reads_its_answers,
    reference_satisfies_checker,
    replay,
    solvable,
)
from coevolve.stages.verify.contamination import HeldOut
from coevolve.stages.verify.settings import VerifySettings
from tests.unit.evolution_world import candidate, family, make_env


def draft_before(check, row: dict, held_out: HeldOut | None = None) -> tuple[CheckContext, Draft]:
    """The context, and the draft of `row` as the checks before `check` leave it."""
    ctx, draft = CheckContext(make_env, held_out or HeldOut(), VerifySettings()), Draft(row)
    for earlier in CHECKS[: CHECKS.index(check)]:
        earlier(ctx, draft)
    return ctx, draft


@pytest.fixture(scope="module")
def bank(world):
    """The bank task, its first two accounts, a read of the first, a transfer between them."""
    task = family(world.train, "bank_balance")
    (a, info_a), (b, info_b) = list(task.initial_state["bank"]["accounts"].items())[:2]
    return SimpleNamespace(
        task=task, a=a, b=b, balance_a=f"{info_a['balance']:.2f}", balance_b=f"{info_b['balance']:.2f}",
        read=[{"name": "get_balance", "arguments": {"account_id": a}}],
        listing=[{"name": "list_accounts", "arguments": {}}],
        transfer=[{"name": "transfer", "arguments": {"from_account": a, "to_account": b, "amount": 5.0}}],
    )


def test_the_checks_run_in_this_order():
    assert [check.__name__ for check in CHECKS] == [
        "drop_unasked_answers", "derive_task", "not_contaminated", "replay", "read_only_asks_a_question",
        "read_only_asks_no_action", "changing_is_asked_for", "read_only_reads_its_answers", "checks_nothing_held_out", "answers_in_results",
        "has_effect",
        "answers_not_leaked", "answers_of_the_named_object", "solvable", "grounded", "reference_satisfies_checker",
    ]  # fmt: skip


def test_drop_unasked_answers_drops_an_instructions_answers_only(bank):
    told = candidate(bank.task, f"Transfer 5 from {bank.a} to {bank.b}.", bank.transfer, ["1631.1"], "told")
    ctx, d = draft_before(drop_unasked_answers, told)
    drop_unasked_answers(ctx, d)
    assert d.dropped == ("1631.1",)
    asked = {**told, "query": f"Transfer 5 from {bank.a} to {bank.b}. What is left?"}
    ctx, d = draft_before(drop_unasked_answers, asked)
    drop_unasked_answers(ctx, d)
    assert d.dropped == ()


def test_derive_task_asks_the_environment_for_the_checker(bank):
    ctx, d = draft_before(derive_task, candidate(bank.task, f"What is {bank.a}'s balance?", bank.read,
                                                 [bank.balance_a], "q"))  # fmt: skip
    derive_task(ctx, d)
    assert set(d.task.checker) == {"final_state", "answers"} and d.task.checker["answers"] == [[bank.balance_a]]
    assert (d.task.source, d.task.family, d.task.solution[0][0].name) == ("synthesized", "synth:get_balance", "get_balance")
    told = candidate(bank.task, f"Transfer 5 from {bank.a} to {bank.b}.", bank.transfer, ["1631.1"], "told")
    ctx, d = draft_before(derive_task, told)
    derive_task(ctx, d)
    assert d.task.checker["answers"] == [[]]  # the dropped answer is not required
    ctx, d = draft_before(derive_task, candidate(bank.task, "Teleport me.", [{"name": "teleport", "arguments": {}}],
                                                 [], "bad"))  # fmt: skip
    with pytest.raises(Rejected, match=r"^replay: reference call teleport\(\) failed"):
        derive_task(ctx, d)


def test_not_contaminated_rejects_a_held_out_solution_or_query(bank):
    row = candidate(bank.task, bank.task.turns[0], [c.model_dump() for c in bank.task.solution[0]], [], "twin")
    ctx, d = draft_before(not_contaminated, row, HeldOut({task_signature(bank.task): "same-solution"}))
    with pytest.raises(Rejected, match="^contamination: near-duplicate of held-out task same-solution$"):
        not_contaminated(ctx, d)
    ctx, d = draft_before(not_contaminated, row, HeldOut(queries=((bank.task.turns[0], "same-query"),)))
    with pytest.raises(Rejected, match="^contamination: near-duplicate of held-out task same-query$"):
        not_contaminated(ctx, d)
    ctx, d = draft_before(not_contaminated, row)
    not_contaminated(ctx, d)  # nothing held out


def test_replay_keeps_the_digests_around_the_solution_and_its_results(bank):
    ctx, d = draft_before(replay, candidate(bank.task, f"What is {bank.a}'s balance?", bank.read, [], "q"))
    replay(ctx, d)
    assert d.read_only and len(d.results) == 1 and bank.balance_a in d.results[0]
    ctx, d = draft_before(replay, candidate(bank.task, f"Transfer 5 from {bank.a} to {bank.b}.", bank.transfer,
                                            [], "t"))  # fmt: skip
    replay(ctx, d)
    assert None not in (d.before, d.after) and not d.read_only
    d.derived = d.task.model_copy(update={"solution": [[ToolCall(name="teleport", arguments={})]]})
    with pytest.raises(Rejected, match="^replay: teleport failed: unknown tool"):
        replay(ctx, d)


def test_read_only_asks_a_question(bank):
    instruction = candidate(bank.task, f"Transfer 125.39 from {bank.a} to {bank.b}.", bank.read, [], "i")
    ctx, d = draft_before(read_only_asks_a_question, instruction)
    with pytest.raises(Rejected, match="^no effect: the solution changes nothing, and the query asks neither a "
                                       "question nor for information"):  # fmt: skip
        read_only_asks_a_question(ctx, d)
    acts = {**instruction, "solution": json.dumps(bank.transfer), "query": f"Transfer 5 from {bank.a} to {bank.b}."}
    ctx, d = draft_before(read_only_asks_a_question, acts)
    read_only_asks_a_question(ctx, d)  # an instruction whose solution acts


def test_read_only_asks_no_action(bank):
    both = candidate(bank.task, f"Move 5 from {bank.a} to {bank.b} and tell me the balance of {bank.a}.", bank.read,
                     [bank.balance_a], "both")  # fmt: skip
    ctx, d = draft_before(read_only_asks_no_action, both)
    with pytest.raises(Rejected, match=r"^no effect: the solution changes nothing, but the query asks for an "
                                       r"action \('Move'; a read-only solution"):  # fmt: skip
        read_only_asks_no_action(ctx, d)
    ctx, d = draft_before(read_only_asks_no_action, {**both, "query": f"Tell me the balance of {bank.a}."})
    read_only_asks_no_action(ctx, d)


def test_changing_is_asked_for(bank):
    question = candidate(bank.task, f"Please tell me the balance of {bank.a}.", bank.transfer, [], "q")
    ctx, d = draft_before(changing_is_asked_for, question)
    with pytest.raises(Rejected, match="^unasked effect: the solution changes the state, but the query only asks "
                                       "for information"):  # fmt: skip
        changing_is_asked_for(ctx, d)
    for query in (f"Transfer 5 from {bank.a} to {bank.b}.", f"Can you transfer 5 from {bank.a} to {bank.b}?",
                  f"What is the balance of {bank.a}? Then move 5 from {bank.a} to {bank.b}."):
        ctx, d = draft_before(changing_is_asked_for, {**question, "query": query})
        changing_is_asked_for(ctx, d)  # asked for
    ctx, d = draft_before(changing_is_asked_for, {**question, "solution": json.dumps(bank.read)})
    changing_is_asked_for(ctx, d)  # a read-only solution of the question


def test_read_only_reads_its_answers_from_the_last_result(bank):
    ctx, d = draft_before(read_only_reads_its_answers, candidate(bank.task, f"Read {bank.a}.", bank.read, [], "r"))
    read_only_reads_its_answers(ctx, d)
    assert d.read == (str(float(bank.balance_a)),) and d.task.checker["answers"] == [list(d.read)]
    ctx, d = draft_before(read_only_reads_its_answers, candidate(bank.task, "Show me my accounts.", bank.listing,
                                                                 [], "all"))  # fmt: skip
    with pytest.raises(Rejected, match=r"^no effect: .* new values \(at most 3 are taken as the answer\)$"):
        read_only_reads_its_answers(ctx, d)
    named = candidate(bank.task, f"What is {bank.a}'s balance?", bank.read, [bank.balance_a], "named")
    ctx, d = draft_before(read_only_reads_its_answers, named)
    read_only_reads_its_answers(ctx, d)
    assert d.read == ()  # the teacher named one


def test_answers_in_results(bank):
    stated = candidate(bank.task, f"What is the balance of {bank.a}? Is it 4242?", bank.read, ["4242"], "s")
    ctx, d = draft_before(answers_in_results, stated)  # the derived checker sees the query's 4242
    with pytest.raises(Rejected, match="^replay: answer 4242 appears in no result of the solution$"):
        answers_in_results(ctx, d)
    ctx, d = draft_before(answers_in_results, {**stated, "answers": json.dumps([bank.balance_a])})
    answers_in_results(ctx, d)


def test_has_effect(bank):
    ctx, d = draft_before(has_effect, candidate(bank.task, f"What is {bank.a}'s balance?", bank.read,
                                                [bank.balance_a], "q"))  # fmt: skip
    has_effect(ctx, d)  # it reads an answer
    d.derived = d.task.model_copy(update={"checker": {**d.task.checker, "answers": [[]]}})
    with pytest.raises(Rejected, match="^no effect: the solution changes nothing and the task asks for no answer$"):
        has_effect(ctx, d)
    d.after = "another state"
    has_effect(ctx, d)  # it changes the state


def test_answers_not_leaked(world):
    lookup = family(world.train, "file_lookup")
    path, text = next(iter(lookup.initial_state["files"]["files"].items()))
    value, read = text.split(": ")[-1], [{"name": "read_file", "arguments": {"path": path}}]
    leaked = candidate(lookup, f"Read {path} and tell me the code: {value}.", read, [value], "leaked")
    ctx, d = draft_before(answers_not_leaked, leaked)
    with pytest.raises(Rejected, match=f"^leaked: answer {value} is stated in the query$"):
        answers_not_leaked(ctx, d)
    ctx, d = draft_before(answers_not_leaked, {**leaked, "query": f"Read {path} and tell me the code."})
    answers_not_leaked(ctx, d)


def test_answers_of_the_named_object(bank):
    misread = candidate(bank.task, f"What is the balance of account {bank.b}?", bank.listing, [bank.balance_a], "m")
    ctx, d = draft_before(answers_of_the_named_object, misread)
    with pytest.raises(Rejected, match=f"^misread: answer {bank.balance_a} is another object's value than the "
                                       "one the query names$"):  # fmt: skip
        answers_of_the_named_object(ctx, d)
    ctx, d = draft_before(answers_of_the_named_object, {**misread, "answers": json.dumps([bank.balance_b])})
    answers_of_the_named_object(ctx, d)


def test_solvable(world):
    messages = family(world.train, "send_message")
    contact = next(iter(messages.initial_state["messages"]["contacts"]))
    send = [{"name": "send_message", "arguments": {"to": contact, "text": "Thanks a lot"}}]
    ctx, d = draft_before(solvable, candidate(messages, f"Thank {contact}.", send, [], "thanks"))
    with pytest.raises(Rejected, match="^unsolvable: argument Thanks a lot of send_message appears neither in the "
                                       "query nor in an earlier result$"):  # fmt: skip
        solvable(ctx, d)
    ctx, d = draft_before(solvable, candidate(messages, f"Text {contact}: 'Thanks a lot'", send, [], "text"))
    solvable(ctx, d)


def test_grounded(bank):
    row = candidate(bank.task, f"What is the balance of {bank.a} once 125.39 went to {bank.b}?", bank.read, [], "g")
    ctx, d = draft_before(grounded, row)
    with pytest.raises(Rejected) as rejected:
        grounded(ctx, d)
    assert str(rejected.value) == (f"ungrounded: the query names 125.39, {bank.b}, which the solution neither "
                                   "uses nor reads (1 of 3 literals grounded)")  # fmt: skip
    grounded(replace(ctx, settings=VerifySettings(grounding=0.3)), d)  # 1 of 3 is enough at 0.3


def test_reference_satisfies_checker(bank):
    ctx, d = draft_before(reference_satisfies_checker, candidate(bank.task, f"What is {bank.a}'s balance?",
                                                                 bank.read, [bank.balance_a], "q"))  # fmt: skip
    reference_satisfies_checker(ctx, d)
    assert (d.executed, d.executed_credit) == (True, 1.0)
    d.derived = d.task.model_copy(update={"checker": {**d.task.checker, "final_state": {}}})  # the state: never
    reference_satisfies_checker(ctx, d)  # verify.judge: execution: the answer is part of the task, retained
    assert d.executed is False and 0 < d.executed_credit < 1
    vetoed = replace(ctx, settings=VerifySettings(judge="policy"))
    with pytest.raises(Rejected, match=r"^checker: the reference solution does not satisfy the derived checker "
                                       r"\(progress 0\.50, an idle answer's 0\.00\)$"):  # fmt: skip
        reference_satisfies_checker(vetoed, d)


def test_check_candidate_keeps_what_the_checks_found(bank):
    row = candidate(bank.task, f"Read {bank.a}.", bank.read, [], "read")
    checked = check_candidate(make_env, row, HeldOut(), VerifySettings())
    _, d = draft_before(reference_satisfies_checker, row)
    assert (checked.row, checked.task, checked.expected_digest) == (row, d.task, d.after)
    assert (checked.read_answers, checked.dropped_answers) == (d.read, ()) and d.read
    assert 0 <= checked.idle_credit < 1


# --- whole candidates ---------------------------------------------------------------------------------


def test_an_answer_read_off_another_object_than_the_query_names_is_a_misread(world):
    bank = family(world.train, "bank_balance")
    (acc_a, a), (acc_b, b) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    listing = [{"name": "list_accounts", "arguments": {}}]
    question = f"What is the balance of account {acc_b}?"
    with pytest.raises(Rejected, match=f"^misread: answer {a['balance']:.2f} is another object's value"):
        check_candidate(make_env, candidate(bank, question, listing, [f"{a['balance']:.2f}"], "misread"), HeldOut(),
                        VerifySettings())  # fmt: skip
    checked = check_candidate(make_env, candidate(bank, question, listing, [f"{b['balance']:.2f}"], "read"), HeldOut(),
                              VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[f"{b['balance']:.2f}"]]
    # a query naming no one object of the listing leaves its answers alone
    checked = check_candidate(make_env, candidate(bank, "Which account holds the most money?", listing,
                                                  [f"{a['balance']:.2f}"], "unnamed"), HeldOut(), VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[f"{a['balance']:.2f}"]]


def test_a_text_answer_the_query_states_is_leaked_and_a_number_is_left_alone(world):
    lookup = family(world.train, "file_lookup")
    path, text = next(iter(lookup.initial_state["files"]["files"].items()))
    value = text.split(": ")[-1]
    read = [{"name": "read_file", "arguments": {"path": path}}]
    with pytest.raises(Rejected, match=f"^leaked: answer {value} is stated in the query"):
        check_candidate(make_env, candidate(lookup, f"Read {path} and tell me the code: {value}.", read, [value],
                                            "leaked"), HeldOut(), VerifySettings())  # fmt: skip
    checked = check_candidate(make_env, candidate(lookup, f"Read {path} and tell me the code.", read, [value],
                                                  "asked"), HeldOut(), VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[value]]
    bank = family(world.train, "bank_balance")
    account, state = next(iter(bank.initial_state["bank"]["accounts"].items()))
    balance = f"{state['balance']:.2f}"
    reads = [{"name": "get_balance", "arguments": {"account_id": account}}]
    checked = check_candidate(make_env, candidate(bank, f"Is the balance of {account} still {balance}? Tell me it.",
                                                  reads, [balance], "number"), HeldOut(), VerifySettings())  # fmt: skip
    assert checked.task.checker["answers"] == [[balance]]


def test_a_question_whose_solution_changes_the_state_is_not_admitted(world):
    """The demo's case: a question about an event, paired with cancelling it. The reference satisfies its own
    checker, so execution alone would accept it; an agent that answers the question fails it."""
    calendar = family(world.train, "reschedule_event")
    event = next(iter(calendar.initial_state["calendar"]["events"]))
    cancel = [{"name": "cancel_event", "arguments": {"event_id": event}}]
    question = candidate(calendar, f"Please tell me the title of the event '{event}'.", cancel, [], "q")
    with pytest.raises(Rejected, match="^unasked effect"):
        check_candidate(make_env, question, HeldOut(), VerifySettings())
    asked = candidate(calendar, f"Cancel the event '{event}'.", cancel, [], "asked")
    assert check_candidate(make_env, asked, HeldOut(), VerifySettings()).executed


def test_an_instruction_is_checked_without_the_answers_nobody_asked_for(world):
    bank = family(world.train, "bank_balance")
    a, b = list(bank.initial_state["bank"]["accounts"])[:2]
    transfer = [{"name": "transfer", "arguments": {"from_account": a, "to_account": b, "amount": 5.0}}]
    env = make_env()
    env.reset(bank)
    left = str(env.step([ToolCall(**transfer[0])]).info["calls"][0]["result"]["from_balance"])
    # the teacher named the balance the transfer returned, which the query never asks for
    told = candidate(bank, f"Transfer 5 from {a} to {b}.", transfer, [left], "told")
    checked = check_candidate(make_env, told, HeldOut(), VerifySettings())
    assert checked.task.checker["answers"] == [[]] and checked.dropped_answers == (left,)
    asked = candidate(bank, f"Transfer 5 from {a} to {b}, then tell me what is left in {a}.", transfer, [left],
                      "asked")  # fmt: skip
    checked = check_candidate(make_env, asked, HeldOut(), VerifySettings())
    assert checked.task.checker["answers"] == [[left]] and checked.dropped_answers == ()
    # an answer no result shows is dropped before the checker's derivation could reject the task for it
    unseen = candidate(bank, f"Transfer 5 from {a} to {b}.", transfer, ["1631.1"], "unseen")
    checked = check_candidate(make_env, unseen, HeldOut(), VerifySettings())
    assert checked.task.checker["answers"] == [[]] and checked.dropped_answers == ("1631.1",)
    with pytest.raises(Rejected, match="^replay: answers"):  # a question keeps its answers: this one is wrong
        check_candidate(make_env, {**unseen, "query": f"Transfer 5 from {a} to {b}. What is left?"}, HeldOut(),
                        VerifySettings())  # fmt: skip
