"""What an English query asks for (`stages.verify.queries`): information or an action, and its literals."""

from __future__ import annotations

import pytest

from coevolve import envs
from coevolve.stages.verify.candidates import replay_solution
from coevolve.stages.verify.queries import asks_for_information, query_literals, requested_action
from tests.unit.evolution_world import make_env


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
        ("Could you kindly integrate Apple's stock into my watchlist?", "integrate"),
        ("Let's lock all the doors, then tell me the fuel level.", "lock"),
        ("Can you fill up the fuel tank?", "fill"),
    ],
)
def test_a_query_may_ask_for_an_action(query, action):
    assert requested_action(query) == action


def test_tool_world_reference_tasks_ask_for_an_action_exactly_when_their_solution_changes_the_state():
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


def test_bfcl_tasks_whose_ground_truth_changes_the_state_do_not_only_ask_for_information():
    """Verification rejects a state-changing solution of a query that only asks for information
    (`checks.changing_is_asked_for`): no BFCL multi-turn task, in the phrasing synthesized BFCL tasks imitate,
    is such a pair."""

    def make_bfcl():
        return envs.make("bfcl")

    changing = 0
    for task in make_bfcl().tasks("all"):
        try:
            before, after, _ = replay_solution(make_bfcl, task)
        except ValueError:  # a ground truth that fails on our executor (one task: see envs/bfcl/env.py)
            continue
        if before != after:
            changing += 1
            assert any(requested_action(t) or not asks_for_information(t) for t in task.turns), task.id
    assert changing > 150
