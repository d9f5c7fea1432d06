"""Chat formatting as token ids for multi-turn tool use (ChatML models: SmolLM2, Qwen).

A rollout builds one growing token sequence per episode: `prompt_ids` renders the system message (the
tool list and the call format), the demonstrations and the conversation so far, ending with the
assistant generation prompt; the engine appends the reply it sampled; `continuation_ids` appends the
environment's answer (tool results in a `<tool_response>` user turn, or the next user message) and a new
generation prompt. Only the sampled reply ids are policy tokens; everything `continuation_ids` returns is
masked out of the loss. Rendering the finished conversation with `prompt_ids` gives the same text as this
incremental construction (the unit tests check it), so training and evaluation see one format.

SmolLM2's own template knows nothing about tools, so the project template puts the tools in the system
message as one signature line each (`get_balance(account_id: string) - Return ...`), which a 135M model
follows far better than raw JSON schemas, and asks for Hermes/Qwen calls
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (parsed by `llm.toolcalls`).

    fmt = ChatFormat(tokenizer)
    ids = fmt.prompt_ids([{"role": "user", "content": "What is my balance?"}], tools=tools)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from coevolve.core import ToolCall
from coevolve.llm.chat_template import chat_template, saved_settings
from coevolve.llm.toolcalls import render_tool_call

START, END = "<|im_start|>", "<|im_end|>"
ROLES = ("system", "user", "assistant", "tool")
DEFAULT_INSTRUCTIONS = "You are a helpful assistant. You solve the user's task by calling tools."
CALL_FORMAT = """To call a tool, reply with one block per call:
<tool_call>
{"name": "<tool name>", "arguments": {"<argument>": <value>}}
</tool_call>
Tool results come back inside <tool_response></tool_response>. When the task is done, answer in plain text without <tool_call>."""


class Continuation(NamedTuple):
    """Ids to append after a generated reply. `closes_turn`: the first id is an inserted end-of-turn."""

    ids: list[int]
    closes_turn: bool


class ChatFormat:
    """ChatML rendering (`<|im_start|>role\\n...<|im_end|>\\n`) with the project's tool template."""

    def __init__(self, tokenizer: Any, *, param_descriptions: bool = False) -> None:
        self.tokenizer = tokenizer
        self.param_descriptions = param_descriptions
        """Also list each argument's description under its tool (longer prompts, more guidance)."""
        template = getattr(tokenizer, "chat_template", None) or ""
        saved = saved_settings(template)
        self.wrap_tool_results = saved["wrap_tool_results"] if saved else "tool_response" in template
        """Tool results as a user turn of `<tool_response>` blocks where the model's own template does that
        (Qwen); otherwise as a plain `tool` turn: SmolLM2 imitates the `<tool_response>` user turns of its
        demonstrations and answers with a made-up tool response (`coevolve bench first-reply-probe`). A
        tokenizer saved with a checkpoint carries this format's own template (`template`), which records it."""
        start_id, end_id = (tokenizer.convert_tokens_to_ids(t) for t in (START, END))
        if START not in template or not _is_single_token(tokenizer, end_id, END) or start_id is None:
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise ValueError(
                f"model {name!r} does not use a ChatML chat template (<|im_start|>role ... <|im_end|>); "
                "only ChatML models (SmolLM2, Qwen) are supported so far"
            )
        self._end_id: int = end_id

    @property
    def end_of_turn_id(self) -> int:
        """The `<|im_end|>` id that ends every turn (and a generated reply)."""
        return self._end_id

    def system_prompt(self, tools: Sequence[dict], instructions: str | None = None) -> str:
        """Instructions, one line per tool, and the tool-call format (no tool part when `tools` is empty)."""
        head = instructions if instructions is not None else DEFAULT_INSTRUCTIONS
        if not tools:
            return head
        lines = [describe_tool(tool, param_descriptions=self.param_descriptions) for tool in tools]
        return f"{head}\n\nYou can call these tools:\n" + "\n".join(lines) + f"\n\n{CALL_FORMAT}"

    def prompt_text(
        self, messages: Sequence[dict], *, tools: Sequence[dict], demonstrations: Sequence[dict] = ()
    ) -> str:
        """System message, demonstrations and messages as text, ending with the generation prompt.

        A leading system message in `messages` replaces the default instructions (the tools stay).
        """
        instructions = None
        if messages and messages[0].get("role") == "system":
            instructions, messages = _content(messages[0]), messages[1:]
        system = _turn("system", self.system_prompt(tools, instructions))
        return system + _turns([*demonstrations, *messages], self.wrap_tool_results) + _generation_prompt()

    def prompt_ids(
        self, messages: Sequence[dict], *, tools: Sequence[dict], demonstrations: Sequence[dict] = ()
    ) -> list[int]:
        """`prompt_text` as token ids."""
        return self.encode(self.prompt_text(messages, tools=tools, demonstrations=demonstrations))

    def continuation_ids(self, new_messages: Sequence[dict], *, last_token_id: int) -> Continuation:
        """Ids that follow a generated reply: close its turn, render `new_messages`, prompt the assistant.

        If the reply was cut by the token cap (`last_token_id` is not end-of-turn), the ids start with an
        end-of-turn token; like the rest of the continuation it is not a policy token.
        """
        closes = last_token_id != self._end_id
        text = (END if closes else "") + "\n" + _turns(new_messages, self.wrap_tool_results) + _generation_prompt()
        return Continuation(self.encode(text), closes)

    def template(self) -> str:
        """This format as a Jinja chat template: `apply_chat_template(demonstrations + messages, tools=tools,
        add_generation_prompt=True)` renders `prompt_text` (`llm.chat_template`)."""
        return chat_template(default_instructions=DEFAULT_INSTRUCTIONS, call_format=CALL_FORMAT,
                             wrap_tool_results=self.wrap_tool_results, param_descriptions=self.param_descriptions)

    def encode(self, text: str) -> list[int]:
        """`text` as token ids, without special tokens added (a reply, a prefix, a turn)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def describe_tool(tool: dict, *, param_descriptions: bool = False) -> str:
    """`name(arg: type, opt?: type) - description` for an OpenAI-format tool (or a bare function spec)."""
    spec = tool.get("function", tool)
    params = spec.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or ())
    args = ", ".join(f"{n}{'' if n in required else '?'}: {_type(s)}" for n, s in props.items())
    line = f"{spec['name']}({args})"
    description = (spec.get("description") or "").strip().splitlines()
    if description:
        line += f" - {description[0]}"
    if param_descriptions:
        for name, schema in props.items():
            if schema.get("description"):
                line += f"\n    {name}: {schema['description'].strip()}"
    return line


def _type(schema: dict) -> str:
    """A compact type: `string`, `integer[]`, `"c" | "f"`, `string | null`."""
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(map(str, kind))
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"{_type(schema['items'])}[]"
    return str(kind)


def _turns(messages: Sequence[dict], wrap_tool_results: bool = True) -> str:
    """Render turns. With `wrap_tool_results`, consecutive `tool` messages share one user turn of
    `<tool_response>` blocks (Qwen); otherwise each is a ChatML `tool` turn."""
    out, pending_tool = [], []
    for message in messages:
        role = message.get("role")
        if role not in ROLES or role == "system":
            raise ValueError(f"unsupported message role {role!r} here (expected user, assistant or tool)")
        if role == "tool" and wrap_tool_results:
            pending_tool.append(f"<tool_response>\n{_content(message)}\n</tool_response>")
            continue
        if pending_tool:
            out.append(_turn("user", "\n".join(pending_tool)))
            pending_tool = []
        out.append(_turn(role, _assistant_content(message) if role == "assistant" else _content(message)))
    if pending_tool:
        out.append(_turn("user", "\n".join(pending_tool)))
    return "".join(out)


def _turn(role: str, content: str) -> str:
    return f"{START}{role}\n{content}{END}\n"


def _generation_prompt() -> str:
    return f"{START}assistant\n"


def _content(message: dict) -> str:
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content)


def _assistant_content(message: dict) -> str:
    """Content followed by OpenAI-style `tool_calls`, if any, as `<tool_call>` blocks."""
    blocks = [_content(message)] if _content(message) else []
    for call in message.get("tool_calls") or ():
        fn = call.get("function", call)
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        blocks.append(render_tool_call(ToolCall(name=fn["name"], arguments=arguments)))
    return "\n".join(blocks)


def _is_single_token(tokenizer: Any, token_id: Any, text: str) -> bool:
    return (
        isinstance(token_id, int)
        and token_id != tokenizer.unk_token_id
        and (tokenizer(text, add_special_tokens=False)["input_ids"] == [token_id])
    )
