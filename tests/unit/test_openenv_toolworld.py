"""The built-in tool world as an OpenEnv environment (`envs.openenv.toolworld_server`), run in process
through the adapter (`env.name: openenv`): the reference solutions of every split replay to the native
environment's rewards, state digests, tool schemas and tool messages; a failing episode earns the same
partial credit; the environment's own verify admits the reference and refuses calls that miss the goal."""

from __future__ import annotations

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from coevolve import envs  # noqa: E402
from coevolve.core import ToolCall  # noqa: E402
from coevolve.envs.replay import final_answer  # noqa: E402

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
