"""Hostile actions in the tool world become error messages and never escape the episode."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.llm.toolcalls import render_tool_call
from tests.unit.tool_world import bank_task, tool_text


@pytest.fixture(scope="module")
def env():
    return envs.make("toolworld", seed=0)


def _deep(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


HOSTILE_ACTIONS = [
    tool_text("rm_rf", path="/"),
    tool_text("__class__"),
    tool_text("__init__"),
    tool_text("__dict__"),
    tool_text("_move"),
    tool_text("state"),
    tool_text("empty_state"),
    tool_text("TOOLS"),
    [{"name": "__class__", "arguments": {}}, {"name": "__getattribute__", "arguments": {"name": "state"}}],
    [{"name": "get_balance", "arguments": {"account_id": ["SAV-2"]}}],
    [{"name": "get_balance", "arguments": {"account_id": "x" * 1_000_000}}],
    [{"name": "get_balance", "arguments": {"account_id": _deep(5000)}}],
    [{"name": "transfer", "arguments": {"from_account": "a", "to_account": "b", "amount": 10**400}}],
    '<tool_call>{"name": "transfer", "arguments": {"from_account": "a", "to_account": "b", '
    '"amount": NaN}}</tool_call>',
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    "<tool_call>" + '{"a":' * 5000 + "1" + "}" * 5000 + "</tool_call>",
    "<tool_call>not json at all</tool_call>",
    "<tool_call>",
    '<tool_call>{"name": 5}</tool_call>',
    '<tool_call>{"name": "get_balance", "arguments": "{\\"account_id\\": \\"\\ud800\\"}"}</tool_call>',
    tool_text("write_file", path="/a/\ud800.txt", content="\udcff bad"),
    "x" * 50_000,
    None,
    42,
    {"name": "get_balance"},
    [5, None, {"name": None}, {"function": "x"}],
    [{"function": {"name": "get_balance", "arguments": "{not json"}}],
]


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
def test_hostile_actions_become_error_messages(env, action):
    env.reset(bank_task(env))
    step = env.step(action)
    assert not step.turn_ended
    contents = [m["content"] for m in step.messages]
    assert contents and all(re.match(r"^(Error: |could not parse tool call: )", c) for c in contents)
    env.state_digest()
    assert not env.evaluate().success


def test_surrogates_in_stored_text_do_not_break_digests_or_snapshots(env):
    task = next(t for t in env.tasks("train") if t.family == "write_note")
    env.reset(task)
    step = env.step(tool_text("write_file", path="/a/\ud800.txt", content="\udcff bad"))
    assert step.info["calls"][0]["ok"]
    env.step("done \ud800")
    assert not env.evaluate().success
    json.dumps(env.snapshot())
    assert len(env.state_digest()) == 16


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(ToolCatalog().names()) | st.text(max_size=12),
    arguments=st.dictionaries(st.text(max_size=15), json_values, max_size=4),
    text=st.text(max_size=40),
)
def test_step_never_raises_on_arbitrary_calls(env, name, arguments, text):
    env.reset(bank_task(env))
    step = env.step([{"name": name, "arguments": arguments}])
    assert len(step.messages) == 1
    env.step(render_tool_call(ToolCall(name="get_balance", arguments=arguments)) + text)
    env.step(text)
    env.evaluate()
    env.state_digest()


class _Canary:
    """Flips when anything reaches it: it lives outside every episode's tools."""

    touched = False

    def __getattr__(self, name):
        _Canary.touched = True
        raise AttributeError(name)


@pytest.mark.slow
@settings(max_examples=3400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from([*ToolCatalog().names(), "__class__", "__init__", "__dict__", "_catalog", "canary",
                          "__import__", "eval", "exec", "os.system", "get_balance.__globals__"]) | st.text(max_size=12),
    arguments=st.dictionaries(st.text(max_size=15), json_values, max_size=4),
    text=st.text(max_size=60),
)
def test_hostile_calls_at_scale_stay_inside_the_episode(env, name, arguments, text):
    """3 hostile steps per example x 3,400 examples: over 10,000 cases per run, none escapes."""
    canary = _Canary()
    env.reset(bank_task(env))
    env.canary = canary  # reachable only by attribute access on the environment itself
    for action in ([{"name": name, "arguments": arguments}],
                   render_tool_call(ToolCall(name=name if name.isidentifier() else "x", arguments=arguments)) + text,
                   f"<tool_call>{text}</tool_call>"):
        step = env.step(action)
        assert all(isinstance(m["content"], str) for m in step.messages)
    env.evaluate()
    assert not _Canary.touched
