"""Untrusted input stays bounded: JSON nested past the cap is refused whole, server replies are read up to a
byte cap, and a key never leaves for a server that did not ask for one or over plain http."""

from __future__ import annotations

import pytest

from coevolve.llm.engine import SamplingParams
from coevolve.llm.openai_engine import OpenAIEngine, OpenAIEngineError
from coevolve.llm.replies import MAX_JSON_DEPTH, JsonReplyError, extract_json
from tests.fakes.openai_server import FakeOpenAIServer


def test_json_nested_past_the_cap_is_refused_not_cut_to_a_fragment():
    deep = '{"a": ' * (MAX_JSON_DEPTH + 5) + '{"plan": "x"}' + "}" * (MAX_JSON_DEPTH + 5)
    with pytest.raises(JsonReplyError, match="nested deeper"):
        extract_json(f"Here: {deep}", dict)
    assert extract_json('{"plan": "ok"} and ' + deep, dict) == {"plan": "ok"}  # a sound value before it is kept


def test_policy_servers_get_no_key_unless_the_config_names_one(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    with FakeOpenAIServer(chat_replies=["hi"]) as server:
        engine = OpenAIEngine(server.base_url, "m", tokenizer=object())
        engine.chat([[{"role": "user", "content": "x"}]], SamplingParams())
        assert "authorization" not in {k.lower() for k in server.requests[-1]["headers"]}
        named = OpenAIEngine(server.base_url, "m", tokenizer=object(), api_key_env="OPENAI_API_KEY")
        named.chat([[{"role": "user", "content": "x"}]], SamplingParams())
        assert {k.lower(): v for k, v in server.requests[-1]["headers"].items()}["authorization"] == "Bearer sk-secret"


def test_a_key_is_never_sent_over_plain_http_to_another_host(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    with pytest.raises(ValueError, match="MY_KEY would be sent in clear text to http://10.0.0.5:8000/v1"):
        OpenAIEngine("http://10.0.0.5:8000/v1", "m", tokenizer=object(), api_key_env="MY_KEY")
    OpenAIEngine("https://api.example.com/v1", "m", tokenizer=object(), api_key_env="MY_KEY")
    OpenAIEngine("http://10.0.0.5:8000/v1", "m", tokenizer=object())  # no key asked for: fine


def test_a_reply_over_the_byte_cap_is_refused():
    with FakeOpenAIServer(chat_replies=["x" * 5000]) as server:
        engine = OpenAIEngine(server.base_url, "m", tokenizer=object(), max_retries=0, max_response_bytes=1000)
        with pytest.raises(OpenAIEngineError, match="larger than 1000 bytes"):
            engine.chat([[{"role": "user", "content": "x"}]], SamplingParams())
