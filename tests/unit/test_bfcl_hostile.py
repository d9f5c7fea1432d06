"""Hostile actions against BfclEnv: each one is an error observation, and nothing outside the episode's
backend instances is reachable (a canary in builtins stays untouched, `eval`/`exec`/`os.system` are never
called, another episode's state does not move)."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coevolve import envs
from coevolve.envs.base import Task


class Canary:
    """An object a successful escape could reach by name."""

    def __init__(self) -> None:
        self.touched = False

    def touch(self, *args, **kwargs) -> str:
        self.touched = True
        return "touched"


@pytest.fixture(scope="module")
def task() -> Task:
    env = envs.make("bfcl")
    # a file system + math task, so file, math and precision-bound tools are all on offer
    return next(t for t in env.tasks("all") if t.family == "GorillaFileSystem+MathAPI")


@pytest.fixture
def guarded(monkeypatch):
    """A canary visible from every module's globals, and tripwires on eval / exec / shell access from our
    code or a BFCL backend (other callers, such as `dataclasses` building a class on import, are let be)."""
    canary, tripped = Canary(), []
    monkeypatch.setattr(builtins, "canary", canary, raising=False)
    monkeypatch.setattr(builtins, "canary_touch", canary.touch, raising=False)

    def tripwire(name, original):
        def wrapper(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if f"{os.sep}envs{os.sep}bfcl{os.sep}" in caller or f"{os.sep}bfcl_eval{os.sep}" in caller:
                tripped.append((name, caller))
            return original(*args, **kwargs)

        return wrapper

    for owner, name in ((builtins, "eval"), (builtins, "exec"), (os, "system"), (subprocess, "Popen")):
        monkeypatch.setattr(owner, name, tripwire(name, getattr(owner, name)))
    yield canary, tripped
    assert not canary.touched and tripped == []


NESTED = "[" * 40 + "1" + "]" * 40
HOSTILE = [
    "[__class__()]", "[_load_scenario(scenario={})]", "[_load_scenario({})]", "[__init__()]", "[__dict__()]",
    "[os.system('touch /tmp/pwned')]", "[a.b.c()]", "[(lambda: canary_touch())()]", "[canary.touch()]",
    "[canary_touch()]", "[__import__('os')]", "[__import__('os').system('x')]", "[cd(folder=__import__('os'))]",
    "[eval('1')]", "[exec('x=1')]", "[globals()]", "[getattr(ls, '__globals__')]",
    "[ls(a=[x for x in range(3)])]", "[cd(folder=pwd())]", "[mean(numbers=[1]*10**9)]",
    "[power(base=10, exponent=10**9)]", "[power(base=10, exponent=1000000000)]",
    "[logarithm(value=10.0, base=2.0, precision=100000000)]", "[square_root(number=2.0, precision=10**8)]",
    "[echo(content='" + "a" * 30_000 + "', file_name='big.txt')]", f"[mean(numbers={NESTED})]",
    "[mean(numbers=" + "[" * 250 + "]" * 250 + ")]", "[mean(numbers=" + "9" * 5000 + ")]",
    "[mean(numbers=[" + "9" * 30 + "])]", "[cd(folder='\ud800')]", "[cd(**{'folder': 'x'})]",
    "[cd(folder=5)]", "[mkdir(dir_name=['a'])]", "[mean(numbers='abc')]", "[cd(folder=None)]", "[cd(folder={1, 2})]",
    "[sort('a', 'b', 'c')]", "[cd('a', folder='b')]",
    '<tool_call>{"name": "__class__", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "_load_scenario", "arguments": {"scenario": {}}}</tool_call>',
    '<tool_call>{"name": "cd", "arguments": {"__class__": 1}}</tool_call>',
    '<tool_call>{"name": "os.system", "arguments": {"command": "x"}}</tool_call>',
    '<tool_call>{"name": "canary_touch", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "cd", "arguments": {"folder": "\\ud800"}}</tool_call>',
    '<tool_call>{"name": "mean", "arguments": {"numbers": ' + "[" * 500 + "]" * 500 + "}}</tool_call>",
    '<tool_call>{"name": "power", "arguments": {"base": 10, "exponent": Infinity}}</tool_call>',
    "<tool_call>not json</tool_call>",
    [{"name": "__init__", "arguments": {}}], [{"name": "cd", "arguments": {"folder": Canary()}}],
    [{"name": "mean", "arguments": {"numbers": [1] * 20_000}}], [{"name": "cd", "arguments": {1: "x"}}],
    [{"name": "cd", "arguments": {"folder": ("a", "b")}}], 12345, [1, 2], [None], {"name": "ls"},
]  # fmt: skip


@pytest.mark.parametrize("action", HOSTILE, ids=lambda a: repr(a)[:40])
def test_hostile_actions_are_error_observations(task, guarded, action):
    env, bystander = envs.make("bfcl"), envs.make("bfcl")
    env.reset(task)
    bystander.reset(task)
    before, bystander_before = env.state_digest(), bystander.state_digest()
    result = env.step(action)
    assert not result.turn_ended and not result.done
    assert result.messages and all(m["role"] == "tool" for m in result.messages)
    assert all(not call["ok"] for call in result.info["calls"])
    assert len(result.messages) == len(result.info["calls"]) + len(result.info["parse_errors"])
    for message in result.messages:
        message["content"].encode("utf-8")
        assert message["content"].startswith(
            ("Error during execution: ", "could not parse tool call: ", '{"error"')
        )
    assert env.state_digest() == before and bystander.state_digest() == bystander_before
    json.dumps(env.snapshot())
    assert not env.evaluate().success


def test_hostile_calls_count_as_steps_and_the_episode_goes_on(task, guarded):
    env = envs.make("bfcl")
    env.reset(task)
    for action in HOSTILE[:20]:
        assert not env.step(action).done
    assert env.step("[pwd()]").done  # the turn's 21st step force-quits the task


# ---------------------------------------------------------------- fuzzing

NAMES = [
    "ls",
    "cd",
    "mkdir",
    "echo",
    "mean",
    "power",
    "logarithm",
    "sort",
    "touch",
    "mv",
    "grep",
    "__class__",
    "__init__",
    "_load_scenario",
    "__import__",
    "canary_touch",
    "eval",
    "os.system",
]
KEYS = [
    "folder",
    "dir_name",
    "file_name",
    "content",
    "numbers",
    "base",
    "exponent",
    "precision",
    "a",
    "__class__",
    "self",
    "x",
]
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)
CALLS = st.lists(
    st.tuples(st.sampled_from(NAMES), st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3)),
    min_size=1,
    max_size=4,
)


def _python_list(calls) -> str:
    return "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"


def _hermes(calls) -> str:
    return "".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)


def _fuzz_step(task, action) -> None:
    env = envs.make("bfcl")
    env.reset(task)
    result = env.step(action)
    for message in result.messages:
        assert message["role"] in ("tool", "user")
        message["content"].encode("utf-8")
    for call in result.info["calls"]:
        if call["name"] not in env._episode.signatures:
            assert not call["ok"]
    env.state_digest()
    env.evaluate()


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(calls=CALLS, hermes=st.booleans())
def test_fuzzed_calls_never_escape(task, guarded, calls, hermes):
    _fuzz_step(task, _hermes(calls) if hermes else _python_list(calls))


@FUZZ
@given(text=st.text(max_size=300) | st.text(alphabet="[]()=,'\"._ abcdx0123\\{}:", max_size=120))
def test_fuzzed_text_never_escapes(task, guarded, text):
    _fuzz_step(task, text)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # x2 steps = 10,000 cases
@given(calls=CALLS, hermes=st.booleans(), text=st.text(max_size=200))
def test_fuzzed_calls_and_text_never_escape_at_scale(task, guarded, calls, hermes, text):
    _fuzz_step(task, _hermes(calls) if hermes else _python_list(calls))
    _fuzz_step(task, _python_list(calls)[: len(text)] + text)
