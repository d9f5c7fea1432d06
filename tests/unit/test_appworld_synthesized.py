"""Synthesized AppWorld tasks against `FakeAppWorldServer`: a checker derived from the solution's run (what
AppWorld's tests of the world report after it, and the answer), satisfied by the reference and not by an
idle answer, and a candidate admitted through `verify_candidates`."""

from __future__ import annotations

import json
from contextlib import closing
from types import SimpleNamespace

import pytest

from coevolve.core import ToolCall
from coevolve.envs.appworld import AppWorldEnv
from coevolve.envs.appworld.actions import code_literals
from coevolve.envs.replay import replay_reference
from coevolve.llm.chat import ChatFormat
from coevolve.stages.verify.candidates import candidate_task, idle_evaluation
from coevolve.stages.verify.verification import VerifySettings, verify_candidates
from tests.fakes.appworld_server import DECLINE, FakeAppWorldServer
from tests.fakes.teacher import OracleEngine


@pytest.fixture
def fake():
    server = FakeAppWorldServer().start()
    yield server
    server.stop()


def _execute(code: str) -> dict:
    return {"name": "execute", "arguments": {"code": code}}


def _row(query: str, world: str, calls: list[dict], answers: list[str]) -> dict:
    """A `candidates` row as abstraction writes it, over AppWorld world `world`."""
    return {
        "candidate_id": "c1", "group_id": "g1", "exploration_id": "x1", "task_id": "t", "env": "appworld",
        "status": "ok", "query": query, "solution": json.dumps(calls), "answers": json.dumps(answers),
        "initial_state": json.dumps({"task_id": world}),
    }  # fmt: skip


DECLINE_ROW = _row("Decline Ann's pending Venmo payment requests.", "a1b2c3d_1", [_execute(DECLINE)], [])
"""The world is completed after the solution (the fake runs one known snippet per execution, so a reference
turn's calls, which `replay_reference` sends as one program, must be one call)."""


def test_a_state_changing_candidate_gets_a_checker_its_reference_satisfies_and_idleness_does_not(fake):
    make_env = lambda: AppWorldEnv(base_url=fake.url, timeout=5)  # noqa: E731
    with closing(make_env()) as env:
        task = candidate_task(env, DECLINE_ROW)
    assert task.source == "synthesized" and task.family == "synth:execute"
    assert task.checker["answers"] == [[]]
    failed = {t["requirement"] for t in task.checker["world_tests"] if not t["passed"]}
    assert failed == {"assert the answer matches", "assert no other database changes"}  # the decline shows
    with closing(make_env()) as env:
        reference = replay_reference(env, task)
    assert reference.success and reference.reward == 1.0
    idle = idle_evaluation(make_env, task)
    assert not idle.success and idle.reward < 0.5
    assert "test 'assert no other database changes'" in idle.details["missed"]


def test_answers_are_read_from_complete_task_and_required_of_the_episode(fake):
    env = AppWorldEnv(base_url=fake.url, timeout=5)
    calls = [[ToolCall(**_execute("apis.supervisor.complete_task(answer='spotify')"))]]
    state, turns = {"task_id": "a1b2c3d_2"}, ["Which app comes first in the app list?"]
    checker = env.derive_checker(state, turns, calls, [["spotify"]])
    assert checker["answers"] == [["spotify"]]
    with pytest.raises(ValueError, match="^answer 'Blue Train' appears in no output"):
        env.derive_checker(state, turns, calls, [["Blue Train"]])
    assert env.derive_checker(state, turns, calls, [["Blue Train"]], strict=False)["answers"] == [[]]
    task = candidate_task(env, _row(turns[0], "a1b2c3d_2", [c.model_dump() for c in calls[0]], ["spotify"]))
    assert replay_reference(env, task).success
    env.reset(task)
    env.step([ToolCall(**_execute("apis.supervisor.complete_task(answer='venmo')"))])
    wrong = env.evaluate()
    assert not wrong.success and wrong.details["missed"] == ["answer 'spotify'"]


def test_a_solution_that_fails_or_checks_nothing_is_refused(fake):
    env = AppWorldEnv(base_url=fake.url, timeout=5)
    state, turns = {"task_id": "e4f5a6b_1"}, ["Do it."]
    with pytest.raises(ValueError, match="^reference call execute failed: Execution failed"):
        env.derive_checker(state, turns, [[ToolCall(**_execute("print(1 / 0)"))]], [[]])
    with pytest.raises(ValueError, match="changes nothing AppWorld's tests of its world observe"):
        env.derive_checker(state, turns, [[ToolCall(**_execute("print('hello')"))]], [[]])
    lenient = env.derive_checker(
        state, turns, [[ToolCall(**_execute("print(1 / 0)"))]], [["Blue Train"]], strict=False
    )
    assert lenient["answers"] == [[]] and lenient["world_tests"]


def test_verification_admits_an_appworld_candidate(fake):
    """The no-verification path (which the issue found rejecting every AppWorld candidate as `replay`)."""
    make_env = lambda: AppWorldEnv(base_url=fake.url, timeout=5)  # noqa: E731
    policy = SimpleNamespace(engine=None, chat=None, version="p")
    out = verify_candidates(policy, make_env, [DECLINE_ROW], [], {}, VerifySettings(verify=False),
                            run="t", round_=0)  # fmt: skip
    (row,) = out["verifications"]
    assert row["outcome"] == "accept", row["reason"]
    task = json.loads(row["task"])
    assert task["source"] == "synthesized" and "world_tests" in json.loads(task["checker"])


def test_verification_with_its_checks_accepts_an_appworld_candidate_worded_in_plain_english(fake, tokenizer):
    """Every check and the policy's attempt, to `accept`, for a query that states the values the code needs
    (`Ann`), not the code: the `solvable` check reads the literals inside the code."""
    make_env = lambda: AppWorldEnv(base_url=fake.url, timeout=5)  # noqa: E731
    with closing(make_env()) as env:
        task = candidate_task(env, DECLINE_ROW)
    policy = SimpleNamespace(engine=OracleEngine(tokenizer, [task]), chat=ChatFormat(tokenizer), version="p")
    out = verify_candidates(policy, make_env, [DECLINE_ROW], [], {}, VerifySettings(), run="t", round_=0)
    (verdict,) = out["verifications"]
    assert verdict["outcome"] == "accept", verdict["reason"]
    assert verdict["reason"].startswith("executed: the reference solution satisfies the checker")
    assert [t["success"] for t in out["trajectories"]] == [True]


def test_a_value_the_code_needs_and_the_query_never_states_is_unsolvable(fake):
    make_env = lambda: AppWorldEnv(base_url=fake.url, timeout=5)  # noqa: E731
    row = {**DECLINE_ROW, "query": "Decline the pending Venmo payment requests."}  # whose? `Ann` is unstated
    policy = SimpleNamespace(engine=None, chat=None, version="p")
    out = verify_candidates(policy, make_env, [row], [], {}, VerifySettings(), run="t", round_=0)
    (verdict,) = out["verifications"]
    assert verdict["outcome"] == "discard" and verdict["reason"].startswith("unsolvable: argument Ann of execute")


def test_code_literals_are_the_values_a_program_states_never_its_navigation():
    code = (
        "token = apis.venmo.login(username='ann@x.com', password=passwords[0]['password'])\n"
        "for r in apis.venmo.show_requests(access_token=token):\n"
        "    print(f\"{r['id']}: {r['amount']}\")\n"
        "apis.supervisor.complete_task(answer=42.5)"
    )
    assert code_literals(code) == ["ann@x.com", 42.5]
    assert code_literals("apis.venmo.decline(") == ["apis.venmo.decline("]  # unparsable: the code itself
