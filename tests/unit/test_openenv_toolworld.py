"""The built-in tool world as an OpenEnv environment (`envs.openenv.toolworld_server`), run in process
through the adapter (`env.name: openenv`): the reference solutions of every split replay to the native
environment's rewards, state digests, tool schemas and tool messages; a failing episode earns the same
partial credit; the environment's own verify admits the reference and refuses calls that miss the goal;
the verify stage gives the native verdicts on the same candidates, except one that stops short of the
explored task's goal (its reset arguments hold that goal)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from coevolve import envs  # noqa: E402
from coevolve.core import ToolCall  # noqa: E402
from coevolve.envs.replay import final_answer  # noqa: E402
from coevolve.stages.verify.candidates import Rejected  # noqa: E402
from coevolve.stages.verify.checks import check_candidate  # noqa: E402
from coevolve.stages.verify.contamination import HeldOut  # noqa: E402
from coevolve.stages.verify.settings import VerifySettings  # noqa: E402

TOOLWORLD = "coevolve.envs.openenv.toolworld_server:ToolWorldOpenEnv"
PER_SPLIT = 6


@pytest.fixture(scope="module")
def pair():
    return envs.make("toolworld"), envs.make("openenv", environment=TOOLWORLD)


def played(env, task, native_task, actions=None):
    """(reward, success, state digest, tool schemas, every step's messages) of `actions` (default: the native
    task's reference, turn by turn, each turn closed by the reference's answer)."""
    observation = env.reset(task)
    messages = []
    if actions is None:
        actions = []
        for turn in range(len(native_task.turns)):
            calls = native_task.solution[turn] if turn < len(native_task.solution) else []
            actions += ([list(calls)] if calls else []) + [final_answer(native_task, turn)]
    for action in actions:
        messages.append(env.step(action).messages)
    evaluation = env.evaluate()
    return evaluation.reward, evaluation.success, env.state_digest(), observation.tools, messages


def test_the_environment_s_task_source_is_the_native_splits(pair):
    native, adapted = pair
    assert adapted.splits() == native.splits()
    assert {s: len(adapted.tasks(s)) for s in adapted.splits()} == {s: len(native.tasks(s)) for s in native.splits()}
    task, own = adapted.tasks("train")[0], native.tasks("train")[0]
    assert task.turns == own.turns and task.initial_state["initial_state"] == own.initial_state
    assert task.solution == own.solution


@pytest.mark.parametrize("split", ["train", "test", "validation", "heldout-templates"])
def test_reference_replays_match_the_native_environment(pair, split):
    native, adapted = pair
    pairs = list(zip(native.tasks(split), adapted.tasks(split), strict=True))[:PER_SPLIT]
    assert any(len(own.turns) > 1 for own, _ in pairs) or split != "heldout-templates"  # multi-turn covered
    for own, task in pairs:
        through_openenv, at_home = played(adapted, task, own), played(native, own, own)
        assert through_openenv == at_home, own.id
        assert at_home[:2] == (1.0, True)


def test_a_failing_episode_earns_the_native_partial_credit(pair):
    native, adapted = pair
    wrong = ['<tool_call>{"name": "teleport", "arguments": {}}</tool_call> <tool_call>{not json</tool_call>',
             "I could not do it."]  # fmt: skip
    for own, task in list(zip(native.tasks("test"), adapted.tasks("test"), strict=True))[:PER_SPLIT]:
        actions = wrong + ["Done."] * (len(own.turns) - 1)
        through_openenv, at_home = played(adapted, task, own, actions), played(native, own, own, actions)
        assert through_openenv == at_home and 0.0 < at_home[0] < 0.5


def test_the_environment_s_verify_admits_the_reference_and_refuses_a_miss(pair):
    native, adapted = pair
    own, task = next((o, t) for o, t in zip(native.tasks("train"), adapted.tasks("train"), strict=True)
                     if o.checker["final_state"] != o.initial_state)  # a task that changes the world
    checker = adapted.derive_checker(task.initial_state, task.turns, own.solution, [[]])
    assert checker["reference_reward"] == 1.0 and checker["idle_reward"] < 0.5
    with pytest.raises(ValueError, match="reference calls reward 0.[0-4]"):
        adapted.derive_checker(task.initial_state, task.turns, [[]], [[]])
    first = own.solution[0][0]
    with pytest.raises(ValueError, match=f"{first.name} failed: .*missing argument"):
        adapted.derive_checker(task.initial_state, task.turns, [[ToolCall(name=first.name, arguments={})]], [[]])


def candidate(task, initial_state, calls):
    return {"candidate_id": "c", "group_id": "g-c", "exploration_id": "x", "task_id": "t", "env": "toolworld",
            "status": "ok", "query": task.turns[0], "solution": json.dumps(calls),
            "answers": json.dumps(task.checker["answers"][0]), "initial_state": json.dumps(initial_state)}  # fmt: skip


def verdict(make, row):
    """The verify stage's verdict on a candidate row: accepted (and executed), or the refusal's kind."""
    try:
        return "accepted", check_candidate(make, row, HeldOut(), VerifySettings()).executed
    except Rejected as refused:
        return "rejected", str(refused).split(":")[0]


def test_verification_gives_the_native_verdicts_on_the_same_candidates(pair):
    native, adapted = pair
    pairs = [(own, task) for own, task in zip(native.tasks("train"), adapted.tasks("train"), strict=True)
             if len(own.turns) == 1][:12]  # fmt: skip
    assert any(own.checker["answers"][0] for own, _ in pairs)  # questions (answers read) and actions both
    seen = set()
    for own, task in pairs:
        reference = [call.model_dump() for call in own.solution[0]]
        for calls in (reference, [], [{"name": reference[0]["name"], "arguments": {}}]):
            at_home = verdict(lambda: envs.make("toolworld"), candidate(own, own.initial_state, calls))
            through_openenv = verdict(lambda: envs.make("openenv", environment=TOOLWORLD),
                                      candidate(own, task.initial_state, calls))  # fmt: skip
            assert through_openenv[0] == at_home[0], (own.id, calls, at_home, through_openenv)
            seen.add(at_home[0])
    assert seen == {"accepted", "rejected"}


def test_a_candidate_short_of_the_explored_goal_is_refused_by_the_environment(pair):
    native, adapted = pair
    own, task = next((o, t) for o, t in zip(native.tasks("train"), adapted.tasks("train"), strict=True)
                     if len(o.turns) == 1 and o.family == "buy_product")  # fmt: skip
    short = [call.model_dump() for call in own.solution[0]][:-1]
    assert verdict(lambda: envs.make("toolworld"), candidate(own, own.initial_state, short))[0] == "accepted"
    refused = verdict(lambda: envs.make("openenv", environment=TOOLWORLD), candidate(own, task.initial_state, short))
    assert refused == ("rejected", "replay")  # its reset arguments hold the explored task's goal
