"""A checkpoint's saved chat template renders the prompt the policy was trained on (`llm.chat_template`):
`apply_chat_template(demonstrations + messages, tools=tools)` on the saved tokenizer gives the ids of
`ChatFormat.prompt_ids(messages, tools=tools, demonstrations=demonstrations)`, tool signatures in the
system message, for both ways of rendering tool results.
"""

from __future__ import annotations

import copy

import pytest
from transformers import AutoTokenizer

from coevolve.llm.chat import ChatFormat
from coevolve.llm.chat_template import saved_settings
from coevolve.llm.models import load_model
from tests.unit.test_llm_chat import CALL, DEMOS, TOOLS, USER


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random-llama")


def saved_tokenizer(model, tokenizer, directory):
    from coevolve.rl.checkpoint import save_checkpoint

    save_checkpoint(model, tokenizer, None, directory)
    return AutoTokenizer.from_pretrained(directory)


def rendered_ids(tokenizer, messages, tools) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def conversations():
    later = [USER, {"role": "assistant", "content": CALL}, {"role": "tool", "content": "done"},
             {"role": "tool", "content": {"balance": 7}}, {"role": "user", "content": "Thanks. And now?"}]  # fmt: skip
    return [[USER], later, [{"role": "system", "content": "You are a bank assistant."}, *later]]


@pytest.mark.parametrize("wrap", [False, True])
def test_the_saved_template_gives_the_training_prompt(tiny, tmp_path, wrap):
    model, tokenizer = tiny
    tokenizer = copy.deepcopy(tokenizer)
    if wrap:  # a model whose own template sends tool results as <tool_response> user turns (Qwen)
        tokenizer.chat_template += "{# <tool_response> #}"
    trained = ChatFormat(tokenizer)
    original = tokenizer.chat_template
    saved = saved_tokenizer(model, tokenizer, tmp_path / "checkpoint")
    assert tokenizer.chat_template == original  # the live tokenizer is left as it was
    assert saved_settings(saved.chat_template) == {"wrap_tool_results": wrap, "param_descriptions": False}
    for messages in conversations():
        for tools in (TOOLS, []):
            system, rest = (messages[:1], messages[1:]) if messages[0]["role"] == "system" else ([], messages)
            want = trained.prompt_ids(messages, tools=tools, demonstrations=DEMOS)
            assert rendered_ids(saved, [*system, *DEMOS, *rest], tools) == want
    assert ChatFormat(saved).wrap_tool_results is wrap  # a format built on the checkpoint renders the same


def test_the_tool_world_prompt_from_a_checkpoint(tiny, tmp_path):
    """The environment's own tools, demonstrations and first turn, as an episode starts (agents.episodes)."""
    from coevolve import envs

    model, tokenizer = tiny
    saved = saved_tokenizer(model, tokenizer, tmp_path / "checkpoint")
    env = envs.make("toolworld", seed=0)
    for task in env.tasks("train")[:5]:
        observation = env.reset(task)
        demonstrations = env.demonstrations()
        want = ChatFormat(tokenizer).prompt_ids(observation.messages, tools=observation.tools,
                                                demonstrations=demonstrations)  # fmt: skip
        assert rendered_ids(saved, [*demonstrations, *observation.messages], observation.tools) == want
        text = saved.decode(want)
        assert all(tool["function"]["name"] + "(" in text for tool in observation.tools)  # signatures


def test_parameter_descriptions_and_string_arguments_render_alike(tiny):
    _, tokenizer = tiny
    fmt = ChatFormat(tokenizer, param_descriptions=True)
    messages = [USER, DEMOS[1]]  # an assistant turn whose call arguments are a JSON string
    text = tokenizer.apply_chat_template([*messages], tools=TOOLS, add_generation_prompt=True, tokenize=False,
                                         chat_template=fmt.template())  # fmt: skip
    assert text == fmt.prompt_text(messages, tools=TOOLS)
    assert "    account_id: Id of the account." in text


def test_unsupported_roles_fail_in_the_template_too(tiny):
    _, tokenizer = tiny
    with pytest.raises(Exception, match="unsupported message role"):
        tokenizer.apply_chat_template([USER, {"role": "system", "content": "late"}], tokenize=False,
                                      chat_template=ChatFormat(tokenizer).template())  # fmt: skip
