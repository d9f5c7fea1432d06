"""verifiers v1 through the adapter (`envs.verifiers`): our own stock-room taskset (`stock_taskset`) run in the
verifiers venv by `bridge.py`: its tasks, tools and rewards as a CoEvolve environment; every task's reference
replays to reward 1.0, doing nothing and a wrong call to 0.0; the verify stage admits a candidate whose calls
reach the goal and refuses, each in one line, one that does not (the replay), one whose untouched task already
passes (vf-validate's noop) and one whose calls fail."""

from __future__ import annotations

import json

import pytest

from coevolve.envs.verifiers.env import OWN_TASKSETS, VENV_PYTHON, VerifiersEnv

if not VENV_PYTHON.is_file():
    pytest.skip("no .venv-verifiers (make verifiers-env builds it)", allow_module_level=True)

from coevolve.envs.base import OptionError  # noqa: E402
from coevolve.stages.verify.candidates import Rejected  # noqa: E402
from coevolve.stages.verify.checks import check_candidate  # noqa: E402
from coevolve.stages.verify.contamination import HeldOut  # noqa: E402
from coevolve.stages.verify.settings import VerifySettings  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # each bridge start imports verifiers (~15 s)

TASKSET = "stock_taskset:StockTaskset"


def stock_room() -> VerifiersEnv:
    return VerifiersEnv(taskset=TASKSET, paths=[OWN_TASKSETS])


@pytest.fixture(scope="module")
def env():
    environment = stock_room()
    yield environment
    environment.shutdown()


def played(env, task, actions) -> tuple[float, list]:
    env.reset(task)
    messages = [env.step(action).messages for action in actions]
    return env.evaluate().reward, messages


def test_the_taskset_s_tasks_and_tools(env):
    tasks = env.tasks("train")
    assert len(tasks) == 12 and env.splits() == ["train"]
    task = tasks[0]
    assert task.turns == ["Make the stock room hold exactly 3 units of bolt."]
    assert task.initial_state["stock"] == {"bolt": 2, "nut": 4} and task.solution[0][0].name == "add_stock"
    tools = {t["function"]["name"]: t["function"] for t in env.reset(task).tools}
    assert set(tools) == {"list_stock", "add_stock", "remove_stock"}
    assert tools["add_stock"]["parameters"]["required"] == ["item", "quantity"]


def test_reference_replays_score_one_and_no_op_or_a_wrong_call_zero(env):
    for task in env.tasks("train"):
        reference = [c.model_dump() for c in task.solution[0]]
        assert played(env, task, [reference, "Done."])[0] == 1.0, task.turns
        assert played(env, task, ["I will not do it."])[0] == 0.0
        (item, want), = task.initial_state["goal"].items()
        wrong = [{"name": "add_stock", "arguments": {"item": item, "quantity": want + 1}}]
        assert played(env, task, [wrong, "Done."])[0] == 0.0


def test_a_tool_that_raises_is_the_agent_s_error_message_and_the_episode_goes_on(env):
    task = env.tasks("train")[1]  # remove from a stock of 3 nuts
    reward, messages = played(env, task, [[{"name": "remove_stock", "arguments": {"item": "nut", "quantity": 99}}],
                                          [{"name": "teleport", "arguments": {}}],
                                          [{"name": "list_stock", "arguments": {}}]])  # fmt: skip
    assert messages[0][0]["content"].startswith("Error:") and "only 3 units of 'nut'" in messages[0][0]["content"]
    assert messages[1][0]["content"].startswith("Error:") and "teleport" in messages[1][0]["content"]
    assert json.loads(messages[2][0]["content"])["nut"] == 3 and reward == 0.0


def candidate(task, calls, initial_state=None):
    """A candidate row explored from `task`, worded as a teacher would: the values of its calls in the query."""
    words = [f"{c['name'].split('_')[0].title()} {c['arguments']['quantity']} units of {c['arguments']['item']}."
             for c in calls]  # fmt: skip
    return {"candidate_id": "c", "group_id": "g-c", "exploration_id": "x", "task_id": task.id, "env": "verifiers",
            "status": "ok", "query": " ".join(words) or task.turns[0], "solution": json.dumps(calls), "answers": "[]",
            "initial_state": json.dumps(initial_state or task.initial_state)}  # fmt: skip


def verdict(row):
    try:
        checked = check_candidate(stock_room, row, HeldOut(), VerifySettings())
    except Rejected as refused:
        return "rejected", str(refused)
    return "accepted", checked.task.checker


def test_the_verify_stage_verifies_candidates_by_replay_and_validate(env):
    task = env.tasks("train")[0]
    reference = [c.model_dump() for c in task.solution[0]]
    outcome, checker = verdict(candidate(task, reference))
    assert outcome == "accepted"
    assert (checker["reference_reward"], checker["idle_reward"], checker["validate"]) == \
        (1.0, 0.0, {"gold": True, "noop": True})  # fmt: skip
    assert verdict(candidate(task, []))[0] == "rejected"
    outcome, reason = verdict(candidate(task, [{"name": "add_stock", "arguments": {"item": "bolt", "quantity": 9}}]))
    assert outcome == "rejected" and "reward 0.00, below success" in reason
    outcome, reason = verdict(candidate(task, [{"name": "remove_stock", "arguments": {"item": "bolt", "quantity": 9}}]))
    assert outcome == "rejected" and "remove_stock failed" in reason


def test_validate_s_noop_check_refuses_a_task_that_already_passes(env):
    task = env.tasks("train")[0]
    solved = {**task.initial_state, "stock": {"bolt": 3}}  # the goal's count already in the room
    with pytest.raises(ValueError, match="doing nothing already earns reward 1.00"):
        env.derive_checker(solved, task.turns, [[]], [[]])
    verdicts = env._connected().ask("validate", data={**solved, "reference": []})
    assert (verdicts["gold"], verdicts["noop"], verdicts["noop_reward"]) == (None, False, 1.0)


def test_bad_options_are_one_line_each(tmp_path):
    with pytest.raises(OptionError, match=r"env.options.python: no verifiers venv at .*make verifiers-env"):
        VerifiersEnv(taskset=TASKSET, python=str(tmp_path / "python")).tasks("train")
    with pytest.raises(OptionError, match="env.options.taskset: name the verifiers taskset as module:Class"):
        VerifiersEnv(taskset="stock_taskset")
    with pytest.raises(OptionError, match="env.options.taskset: verifiers load: ModuleNotFoundError.*no_such"):
        VerifiersEnv(taskset="no_such_module:Tasks", paths=[OWN_TASKSETS]).tasks("train")
