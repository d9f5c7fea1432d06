"""Teacher plumbing: tolerant JSON extraction, prompt files, and OpenAIEngine against a dummy server."""

from __future__ import annotations

import json

import pytest

from coevolve.llm.engine import SamplingParams
from coevolve.llm.openai_engine import OpenAIEngine, OpenAIEngineError
from coevolve.llm.replies import MAX_JSON_DEPTH, MAX_REPLY_CHARS, JsonReplyError, extract_json
from coevolve.stages.abstract import prompting as abstract_prompts
from coevolve.stages.explore import prompting as explore_prompts
from tests.fakes.openai_server import FakeOpenAIServer

# --- extract_json -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expect", "value"),
    [
        ('{"plan": "x"}', dict, {"plan": "x"}),
        (
            'Sure! Here it is:\n```json\n{"plan": "x", "tools": ["a"]}\n```\nHope that helps.',
            dict,
            {"plan": "x", "tools": ["a"]},
        ),
        ('Thinking {not json} ... then [1, 2] and {"plan": "y"}', dict, {"plan": "y"}),
        ('prose [{"query": "q", "solution": [0]}] trailing }', list, [{"query": "q", "solution": [0]}]),
        ('{"a": 1} and then [3]', list, [3]),
        ("```\n[1]\n```", None, [1]),
    ],
)
def test_extract_json_finds_the_first_value_of_the_wanted_type(reply, expect, value):
    assert extract_json(reply, expect) == value


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "empty reply"),
        ("no json at all", "no JSON object"),
        ('{"plan": "unterminated', "no JSON object"),
        ("[" * 5000, "no JSON object"),  # hostile nesting: bounded work, no RecursionError
        ("x" * (MAX_REPLY_CHARS + 1), "too long"),
    ],
)
def test_extract_json_rejects_with_a_reason(reply, reason):
    with pytest.raises(JsonReplyError, match=reason):
        extract_json(reply, dict)


def test_extract_json_refuses_values_nested_deeper_than_the_cap():
    with pytest.raises(JsonReplyError, match=f"deeper than {MAX_JSON_DEPTH}"):
        extract_json('{"a": ' * 30 + "1" + "}" * 30, dict)  # not an inner fragment of it


def test_extract_json_never_evaluates_code():
    reply = '__import__("os").system("echo pwned") {"plan": "__import__(\'os\')"}'
    assert extract_json(reply, dict) == {"plan": "__import__('os')"}  # just a string


# --- prompts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reflect", "explore", "abstract"])
def test_prompt_files_render_and_show_a_parsable_example(name):
    prompts = abstract_prompts if name == "abstract" else explore_prompts  # each beside the phase that sends it
    template = prompts.prompt_template(name, prompts.__package__, prompts.PROMPTS)
    placeholders = {
        m.group("named") or m.group("braced")
        for m in template.pattern.finditer(template.template)
        if m.group("named") or m.group("braced")
    }
    text = prompts.render_prompt(name, **{p: f"<{p}>" for p in placeholders})
    assert "$" not in text
    if name != "explore":  # the JSON-answering prompts carry one parsable example reply
        example = text.split("Example reply:")[1]
        assert extract_json(example, dict if name == "reflect" else list)


# --- OpenAIEngine -------------------------------------------------------------------------------


def test_chat_completions_send_the_key_and_sampling(monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    with FakeOpenAIServer(chat_replies=["first", "second"]) as server:
        engine = OpenAIEngine(server.base_url, "teacher-model", api_key_env="FAKE_KEY", max_retries=0)
        replies = engine.chat(
            [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
            SamplingParams(temperature=0.5, max_new_tokens=7, seed=3),
        )
        engine.close()
    assert replies == ["first", "second"]
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"] | {"messages": None} == {
        "model": "teacher-model",
        "messages": None,
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 1.0,
        "seed": 3,
    }


def test_generate_sends_token_ids_and_keeps_the_servers_ids_and_logprobs():
    with FakeOpenAIServer(completion_ids=[5, 6, 7]) as server:
        engine = OpenAIEngine(server.base_url, "policy", api_key_env=None, max_retries=0)
        [done] = engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=8, greedy=True))
        [cut] = engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2, stop_token_ids=(9,)))
    assert (done.token_ids, done.logprobs, done.finish_reason) == ([5, 6, 7], [-0.5] * 3, "stop")
    assert (cut.token_ids, cut.finish_reason) == ([5, 6], "length")
    body = server.requests[0]["body"]
    assert body["prompt"] == [1, 2, 3] and body["return_tokens_as_token_ids"] and body["temperature"] == 0.0
    assert "Authorization" not in server.requests[0]["headers"]
    assert server.requests[1]["body"]["stop_token_ids"] == [9]


class _CharTokenizer:
    """Byte-level stand-in tokenizer: one id per character."""

    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def test_text_mode_decodes_the_prompt_and_reencodes_the_reply():
    with FakeOpenAIServer(completion_text="hi!") as server:
        engine = OpenAIEngine(
            server.base_url,
            "other-vocab",
            api_key_env=None,
            tokenizer=_CharTokenizer(),
            token_ids=False,
            max_retries=0,
        )
        [completion] = engine.generate([[ord("o"), ord("k")]], SamplingParams(max_new_tokens=4))
    assert server.requests[0]["body"]["prompt"] == "ok"
    assert completion.token_ids == [ord("h"), ord("i"), ord("!")] and completion.logprobs == [0.0] * 3


def test_retries_on_503_then_succeeds():
    with FakeOpenAIServer(chat_replies=["ok"], fail_first=2) as server:
        engine = OpenAIEngine(server.base_url, "m", api_key_env=None, max_retries=2, backoff_s=0.01)
        assert engine.chat([[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=1)) == ["ok"]
    assert len(server.requests) == 3


def test_gives_up_after_retries_and_on_timeouts():
    with FakeOpenAIServer(fail_first=10) as server:
        engine = OpenAIEngine(server.base_url, "m", api_key_env=None, max_retries=1, backoff_s=0.01)
        with pytest.raises(OpenAIEngineError, match="after 2 attempts.*HTTP 503"):
            engine.chat([[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=1))
    with FakeOpenAIServer(delay_s=0.5) as server:
        engine = OpenAIEngine(server.base_url, "m", api_key_env=None, max_retries=0, timeout_s=0.1)
        with pytest.raises(OpenAIEngineError, match="Timeout"):
            engine.chat([[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=1))


def test_client_errors_fail_at_once_and_unknown_shapes_are_errors():
    with FakeOpenAIServer() as server:
        engine = OpenAIEngine(
            server.base_url.removesuffix("/v1") + "/nope", "m", api_key_env=None, max_retries=3
        )
        with pytest.raises(OpenAIEngineError, match="HTTP 404"):
            engine.chat([[{"role": "user", "content": "x"}]], SamplingParams(max_new_tokens=1))
    assert len(server.requests) == 1
    with FakeOpenAIServer(completion_ids=[]) as server:  # no token ids and no tokenizer
        engine = OpenAIEngine(server.base_url, "m", api_key_env=None)
        with pytest.raises(OpenAIEngineError, match="no token ids"):
            engine.generate([[1]], SamplingParams(max_new_tokens=1))


def test_make_teacher_openai_uses_the_configured_server(tmp_path):
    from coevolve.config import parse_config
    from coevolve.flows.run_context import open_run

    with FakeOpenAIServer(chat_replies=[json.dumps({"plan": "p"})]) as server:
        cfg = parse_config(
            {
                "model": {"name": "tiny-random-llama"},
                "teacher": {
                    "type": "openai",
                    "base_url": server.base_url,
                    "model": "big",
                    "tokenizer": "tiny-random-llama",
                },
            },
            source="test",
        )
        teacher = open_run(cfg, "t", tmp_path, quiet=True).make_teacher(-1)
        reply = teacher.complete(
            [[{"role": "user", "content": "reflect"}]], teacher.settings.text_sampling(0)
        )
    assert teacher.version == f"openai:big@{server.base_url}"
    assert reply == ['{"plan": "p"}'] and server.requests[0]["body"]["max_tokens"] == 1024


def test_make_teacher_local_loads_its_own_model_once(tmp_path):
    from coevolve.config import parse_config
    from coevolve.flows.run_context import open_run
    from coevolve.stages.explore.prompting import REFLECT_PREFIX

    cfg = parse_config({"model": {"name": "tiny-random-llama"},
                        "teacher": {"type": "local", "model": "tiny-random-llama", "max_new_tokens": 4}},
                       source="test")  # fmt: skip
    ctx = open_run(cfg, "t", tmp_path, quiet=True)
    teacher, again = ctx.make_teacher(-1), ctx.make_teacher(3)
    assert teacher.version == again.version == "local:tiny-random-llama:float32"
    assert again.engine is teacher.engine  # loaded once per process, whatever the round
    assert teacher.engine.model is not ctx.use_policy(-1).engine.model  # not the policy's weights
    (reply,) = teacher.complete([[{"role": "user", "content": "Reflect."}]], teacher.settings.text_sampling(0),
                                reply_prefix=REFLECT_PREFIX)  # fmt: skip
    assert reply.startswith(REFLECT_PREFIX)
    with pytest.raises(ValueError, match="teacher.local.model"):
        parse_config({"teacher": {"type": "local"}}, source="test")


def test_engine_teacher_starts_its_reply_with_the_prefix():
    from coevolve.agents.teacher import EngineTeacher, TeacherSettings
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.hf_engine import HfEngine
    from coevolve.llm.models import load_model
    from coevolve.stages.explore.prompting import REFLECT_PREFIX

    model, tokenizer = load_model("tiny-random-llama")
    teacher = EngineTeacher(
        "v", HfEngine(model, tokenizer), ChatFormat(tokenizer), TeacherSettings(1.0, 8, 8, 512)
    )
    conversation = [{"role": "user", "content": "Reflect."}]
    sampling = SamplingParams(greedy=True, max_new_tokens=4)
    (plain,) = teacher.complete([conversation], sampling)
    (primed,) = teacher.complete([conversation], sampling, reply_prefix=REFLECT_PREFIX)
    assert primed.startswith(REFLECT_PREFIX) and not plain.startswith(REFLECT_PREFIX)
    # the model continued the prefix: the same as generating from the prompt with the prefix appended
    prompt = teacher.chat.prompt_ids(conversation, tools=[]) + tokenizer.encode(
        REFLECT_PREFIX, add_special_tokens=False
    )
    assert primed == REFLECT_PREFIX + teacher.engine.generate([prompt], sampling)[0].text
