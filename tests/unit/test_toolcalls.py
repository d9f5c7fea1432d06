"""The Hermes/Qwen reply parser: well-formed calls, malformed and hostile replies never raise."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coevolve.core import ToolCall
from coevolve.llm.toolcalls import MAX_CALLS, parse_tool_calls, render_tool_call


def test_calls_and_content_are_separated():
    reply = 'Let me check.\n<tool_call>\n{"name": "get_balance", "arguments": {"account_id": "SAV-2"}}\n</tool_call>'
    parsed = parse_tool_calls(reply)
    assert parsed.calls == [ToolCall(name="get_balance", arguments={"account_id": "SAV-2"})]
    assert parsed.errors == [] and parsed.content == "Let me check."


def test_several_calls_and_an_unclosed_last_block():
    reply = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>'
             '<tool_call>{"name": "b", "arguments": {"x": 1}}')
    assert [c.name for c in parse_tool_calls(reply).calls] == ["a", "b"]


def test_double_encoded_arguments_are_accepted():
    reply = '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert parse_tool_calls(reply).calls[0].arguments == {"x": 1}


def test_plain_answer_has_no_tool_syntax():
    parsed = parse_tool_calls("The balance is 310.25.")
    assert not parsed.has_tool_syntax and parsed.content == "The balance is 310.25."


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("<tool_call>{not json}</tool_call>", "invalid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "expected a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "invalid tool name"),
        ('<tool_call>{"name": "__import__(\'os\')", "arguments": {}}</tool_call>', "invalid tool name"),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "a", "arguments": "nope"}</tool_call>', "not a JSON object"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "too long"),
        ("<tool_call>" + "[" * 5_000 + "]" * 5_000 + "</tool_call>", "invalid JSON"),
    ],
)
def test_malformed_calls_become_errors(reply, message):
    parsed = parse_tool_calls(reply)
    assert parsed.calls == [] and len(parsed.errors) == 1
    assert message in parsed.errors[0]


def test_number_of_calls_is_capped():
    reply = '<tool_call>{"name": "a", "arguments": {}}</tool_call>' * (MAX_CALLS + 5)
    parsed = parse_tool_calls(reply)
    assert len(parsed.calls) == MAX_CALLS and "more than" in parsed.errors[-1]


def test_render_round_trips():
    call = ToolCall(name="send_message", arguments={"to": "Bob", "text": "héllo \"x\""})
    assert parse_tool_calls(render_tool_call(call)).calls == [call]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400), st.text(max_size=200))
def test_any_text_parses_without_raising(prefix, payload):
    for reply in (prefix, f"{prefix}<tool_call>{payload}</tool_call>", f"<tool_call>{payload}"):
        parsed = parse_tool_calls(reply)
        assert all(isinstance(c, ToolCall) for c in parsed.calls)
        json.dumps([c.model_dump() for c in parsed.calls])
