"""ChatFormat: tool docs in the system prompt, tool turns, incremental == whole-conversation rendering."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from coevolve.llm.chat import ChatFormat, describe_tool
from coevolve.llm.models import resolve_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_balance",
            "description": "Return the balance of an account.\nMore detail nobody needs.",
            "parameters": {
                "type": "object",
                "properties": {"account_id": {"type": "string", "description": "Id of the account."}},
                "required": ["account_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "transfer",
            "description": "Move money between accounts.",
            "parameters": {
                "type": "object",
                "properties": {
                    "source": {"type": "string", "description": "From."},
                    "target": {"type": "string", "description": "To."},
                    "amount": {"type": "number", "description": "How much."},
                    "currency": {"type": "string", "enum": ["EUR", "USD"], "description": "Currency."},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels."},
                },
                "required": ["source", "target", "amount"],
            },
        },
    },
]
USER = {"role": "user", "content": "Move 5 EUR from A1 to B2, then tell me the balance of A1."}
CALL = '<tool_call>\n{"name": "transfer", "arguments": {"source": "A1", "target": "B2", "amount": 5}}\n</tool_call>'
DEMOS = [
    {"role": "user", "content": "Balance of Z9?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_balance", "arguments": '{"account_id": "Z9"}'}}
        ],
    },
    {"role": "tool", "content": {"balance": 12}},
    {"role": "assistant", "content": "Z9 holds 12."},
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))


@pytest.fixture(scope="module")
def fmt(tokenizer):
    return ChatFormat(tokenizer)


def test_tool_docs_are_compact_lines_in_the_system_prompt(fmt):
    system = fmt.system_prompt(TOOLS, instructions="You are a bank assistant.")
    assert system.startswith("You are a bank assistant.")
    assert "get_balance(account_id: string) - Return the balance of an account." in system
    assert (
        'transfer(source: string, target: string, amount: number, currency?: "EUR" | "USD", tags?: string[])'
        in system
    )
    assert "More detail nobody needs" not in system and '"properties"' not in system
    assert "<tool_call>" in system and "plain text" in system
    assert fmt.system_prompt([]) == fmt.system_prompt([], None)  # no tool section without tools
    assert "<tool_call>" not in fmt.system_prompt([])


def test_parameter_descriptions_on_request():
    line = describe_tool(TOOLS[0], param_descriptions=True)
    assert line.splitlines()[1].strip() == "account_id: Id of the account."


def test_prompt_renders_chatml_with_tool_turns(fmt, tokenizer):
    messages = [
        USER,
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": "ok"},
        {"role": "tool", "content": "42"},
    ]
    text = tokenizer.decode(fmt.prompt_ids(messages, tools=TOOLS, demonstrations=DEMOS))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert text.index("Balance of Z9?") < text.index(USER["content"])  # demonstrations come first
    assert '<tool_call>\n{"name": "get_balance", "arguments": {"account_id": "Z9"}}\n</tool_call>' in text
    # SmolLM2's template knows no tools: results are plain `tool` turns
    assert not fmt.wrap_tool_results
    assert '<|im_start|>tool\n{"balance": 12}<|im_end|>' in text
    assert "<|im_start|>tool\nok<|im_end|>\n<|im_start|>tool\n42<|im_end|>" in text


def test_tool_results_wrapped_qwen_style_when_the_template_does(tokenizer):
    wrapping = ChatFormat(tokenizer)
    wrapping.wrap_tool_results = True  # as for a template that renders <tool_response> (Qwen)
    messages = [USER, {"role": "assistant", "content": CALL}, {"role": "tool", "content": "ok"},
                {"role": "tool", "content": "42"}]
    text = wrapping.prompt_text(messages, tools=TOOLS)
    both = "<|im_start|>user\n<tool_response>\nok\n</tool_response>\n<tool_response>\n42\n</tool_response><|im_end|>"
    assert both in text  # consecutive tool results share one user turn


def test_leading_system_message_replaces_instructions(fmt):
    text = fmt.prompt_text([{"role": "system", "content": "Be terse."}, USER], tools=TOOLS)
    assert text.startswith("<|im_start|>system\nBe terse.\n\nYou can call these tools:")
    assert text.count("<|im_start|>system") == 1


@pytest.mark.parametrize("cut", [False, True])
def test_incremental_construction_matches_whole_conversation(fmt, tokenizer, cut):
    reply_text = CALL if not cut else CALL[:40]
    reply_ids = tokenizer(reply_text, add_special_tokens=False)["input_ids"]
    if not cut:
        reply_ids.append(fmt.end_of_turn_id)
    results = [{"role": "tool", "content": '{"status": "done"}'}]
    ids = fmt.prompt_ids([USER], tools=TOOLS, demonstrations=DEMOS) + reply_ids
    cont = fmt.continuation_ids(results, last_token_id=reply_ids[-1])
    assert cont.closes_turn == cut and (cont.ids[0] == fmt.end_of_turn_id) == cut
    ids += cont.ids
    # second round: a final answer, then the user speaks again
    answer_ids = tokenizer("Done. A1 holds 7.", add_special_tokens=False)["input_ids"] + [fmt.end_of_turn_id]
    follow_up = [{"role": "user", "content": "Thanks!"}]
    ids += answer_ids + fmt.continuation_ids(follow_up, last_token_id=fmt.end_of_turn_id).ids

    whole = [USER, {"role": "assistant", "content": reply_text}, *results]
    whole += [{"role": "assistant", "content": "Done. A1 holds 7."}, *follow_up]
    expected = fmt.prompt_ids(whole, tools=TOOLS, demonstrations=DEMOS)
    assert tokenizer.decode(ids) == tokenizer.decode(expected)


def test_end_of_turn_is_im_end(fmt, tokenizer):
    assert fmt.end_of_turn_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_non_chatml_template_is_rejected():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))
    tokenizer.chat_template = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
    with pytest.raises(ValueError, match="ChatML"):
        ChatFormat(tokenizer)


def test_unknown_role_is_rejected(fmt):
    with pytest.raises(ValueError, match="role"):
        fmt.prompt_ids([{"role": "narrator", "content": "x"}], tools=TOOLS)
