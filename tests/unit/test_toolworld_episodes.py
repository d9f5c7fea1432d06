"""The tool world's episode protocol: messages and info, turns, the step cap, partial credit, state
isolation, snapshots and digests, tool modes, argument checks, demonstrations, bad options."""

from __future__ import annotations

import copy
import json

import pytest

from coevolve import envs
from coevolve.envs.replay import replay_reference
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.llm.toolcalls import parse_tool_calls
from tests.unit.tool_world import SMALL, bank_task, tool_text


@pytest.fixture(scope="module")
def env():
    return envs.make("toolworld", seed=0)


def test_single_turn_episode_messages_and_info(env):
    task = bank_task(env)
    account = task.solution[0][0].arguments["account_id"]
    observation = env.reset(task)
    assert observation.messages == [{"role": "user", "content": task.turns[0]}]
    assert {s["function"]["name"] for s in observation.tools} == set(ToolCatalog().names({"bank"}))
    step = env.step(
        "Let me check. " + tool_text("get_balance", account_id=account) + "<tool_call>oops</tool_call>"
    )
    assert not step.done and not step.turn_ended and step.info["turn"] == 0
    assert [m["role"] for m in step.messages] == ["tool", "tool"]
    assert json.loads(step.messages[0]["content"])["account_id"] == account
    assert step.messages[1]["content"].startswith("could not parse tool call:")
    assert step.info["calls"][0]["ok"] and step.info["calls"][0]["name"] == "get_balance"
    assert len(step.info["parse_errors"]) == 1
    final = env.step(f"The balance is {task.checker['answers'][0][0]}.")
    assert final.done and final.turn_ended and final.messages == []
    assert env.evaluate().success
    after = env.step("anything")
    assert after.done and after.messages == []


def test_multi_turn_episode_hands_over_the_next_user_turn(env):
    task = next(t for t in env.tasks("train") if len(t.turns) == 2)
    env.reset(task)
    env.step(list(task.solution[0]))
    step = env.step("Answer: " + " ".join(task.checker["answers"][0]))
    assert step.turn_ended and not step.done and step.messages == [{"role": "user", "content": task.turns[1]}]
    env.step(list(task.solution[1]))
    assert env.step("Answer: " + " ".join(task.checker["answers"][1])).done
    assert env.evaluate().success


def test_step_cap_ends_the_turn_without_an_answer():
    env = envs.make("toolworld", max_steps_per_turn=2, **SMALL)
    task = bank_task(env)
    env.reset(task)
    answer = task.checker["answers"][0][0]
    call = tool_text("get_balance", account_id=task.solution[0][0].arguments["account_id"])
    assert not env.step(call).turn_ended and not env.step(call).turn_ended
    capped = env.step(call + " " + answer)
    assert capped.turn_ended and capped.done and capped.info["step_limit"] and capped.info["calls"] == []
    evaluation = env.evaluate()
    # state check passed (1 of 2 checks), a call ran, and it was the solution's only tool
    assert not evaluation.success and evaluation.reward == pytest.approx(0.35 * 1 / 2 + 0.05 + 0.05 + 0.04)


def test_partial_credit_separates_the_right_tool_from_a_wrong_one():
    env = envs.make("toolworld", **SMALL)
    task = bank_task(env)
    account = task.solution[0][0].arguments["account_id"]
    rewards = {}
    for name, call in {"right": tool_text("get_balance", account_id=account),
                       "right-tool-bad-args": tool_text("get_balance", account_id="NOPE-0"),
                       "other": tool_text("list_accounts"), "hallucinated": tool_text("get_car", kind="fast"),
                       "malformed": '<tool_call>{"name": "get_balance" "x"}</tool_call>',
                       "none": "I cannot help."}.items():  # fmt: skip
        env.reset(task)
        env.step(call)
        env.step("Done.")
        rewards[name] = env.evaluate().reward
    assert rewards["right"] > rewards["other"] > rewards["none"]
    assert rewards["right"] > rewards["right-tool-bad-args"] > rewards["hallucinated"] > rewards["none"]
    assert rewards["malformed"] == rewards["none"] and rewards["right"] < 0.5


def test_reset_loads_a_copy_and_instances_share_nothing(env):
    task = next(t for t in env.tasks("train") if t.family == "transfer_funds")
    original = copy.deepcopy(task.initial_state)
    other = envs.make("toolworld", **SMALL)
    other.reset(task)
    replay_reference(env, task)
    assert task.initial_state == original
    assert other.state_digest() != env.state_digest()
    assert not other.evaluate().success


def test_snapshot_restore_and_digest(env):
    task = next(t for t in env.tasks("train") if t.family == "balance_then_transfer")
    env.reset(task)
    start = env.state_digest()
    env.step(list(task.solution[0]))
    env.step("Answer: " + task.checker["answers"][0][0])
    snapshot = json.loads(json.dumps(env.snapshot()))
    env.step(list(task.solution[1]))
    assert env.state_digest() != start
    fresh = envs.make("toolworld", **SMALL)
    fresh.restore(snapshot)
    assert fresh.state_digest() == start
    fresh.step(list(task.solution[1]))
    assert fresh.step("Answer: " + task.checker["answers"][1][0]).done
    assert fresh.evaluate().success


def test_all_tools_mode_offers_everything_and_stray_writes_fail(env):
    wide = envs.make("toolworld", tools="all", **SMALL)
    task = bank_task(wide)
    observation = wide.reset(task)
    assert len(observation.tools) == len(ToolCatalog().names())
    wide.step(
        list(task.solution[0]) + [{"name": "write_file", "arguments": {"path": "/a/b.txt", "content": "hi"}}]
    )
    wide.step("Answer: " + task.checker["answers"][0][0])
    evaluation = wide.evaluate()
    assert not evaluation.success and evaluation.details["mismatched_apps"] == ["files"]
    env.reset(task)
    step = env.step([{"name": "write_file", "arguments": {"path": "/a/b.txt", "content": "hi"}}])
    assert step.messages[0]["content"].startswith("Error: unknown tool")


def test_argument_validation_errors(env):
    env.reset(bank_task(env))
    cases = [
        ({}, "missing argument"),
        ({"account_id": 5}, "must be a string"),
        ({"account_id": "NOPE-0"}, "unknown account"),
    ]
    for arguments, expected in cases:
        content = env.step([{"name": "get_balance", "arguments": arguments}]).messages[0]["content"]
        assert content.startswith("Error:") and expected in content, content
    content = env.step(
        [{"name": "transfer", "arguments": {"from_account": "a", "to_account": "b", "amount": True}}]
    ).messages[0]["content"]
    assert "must be a number" in content


def test_unknown_arguments_are_ignored_with_a_note_unless_strict():
    lenient = envs.make("toolworld", n_train=10, n_test=2, n_heldout=2)
    task = bank_task(lenient)
    account = task.solution[0][0].arguments["account_id"]
    lenient.reset(task)
    content = lenient.step([{"name": "get_balance", "arguments": {"account_id": account, "pin": 1}}]).messages[0]["content"]
    assert not content.startswith("Error:") and 'Note: ignored unknown argument(s) "pin"' in content
    strict = envs.make("toolworld", n_train=10, n_test=2, n_heldout=2, strict_arguments=True)
    strict.reset(task)
    content = strict.step([{"name": "get_balance", "arguments": {"account_id": account, "pin": 1}}]).messages[0]["content"]
    assert content.startswith("Error:") and "unknown argument" in content


def test_demonstrations_use_real_tools_in_the_call_format(env):
    messages = env.demonstrations()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"] * 2
    names = set(ToolCatalog().names())
    for reply in (messages[1], messages[5]):
        parsed = parse_tool_calls(reply["content"])
        assert len(parsed.calls) == 1 and parsed.calls[0].name in names
    assert not messages[2]["content"].startswith("Error") and not messages[6]["content"].startswith("Error")
    assert not parse_tool_calls(messages[3]["content"]).has_tool_syntax


def test_bad_options_and_splits_are_rejected():
    with pytest.raises(ValueError):
        envs.make("toolworld", tools="some")
    with pytest.raises(ValueError):
        envs.make("toolworld", **SMALL).tasks("dev")
