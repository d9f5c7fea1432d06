"""Parse tool calls out of a model reply (Hermes / Qwen `<tool_call>{json}</tool_call>` format).

The parser never evaluates anything: the payload between the tags goes through `json.loads` only, and
whatever is not a `{"name": str, "arguments": object}` becomes a parse error. Environments turn parse
errors into observations ("could not parse tool call: ...") so a malformed reply is data, not a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from coevolve.core import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_REPLY_CHARS = 20_000
MAX_CALLS = 16
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,63}")
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


@dataclass
class ParsedReply:
    """A reply split into its tool calls, the parse errors, and the text outside the tags."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    content: str = ""

    @property
    def has_tool_syntax(self) -> bool:
        return bool(self.calls or self.errors)


def parse_tool_calls(reply: str) -> ParsedReply:
    """Split `reply` into calls, errors and plain content. Never raises on any string."""
    if not isinstance(reply, str):
        return ParsedReply(errors=[f"reply is {type(reply).__name__}, not text"])
    if len(reply) > MAX_REPLY_CHARS:
        return ParsedReply(errors=[f"reply too long ({len(reply)} characters)"], content=reply[:200])
    parsed = ParsedReply(content=_BLOCK.sub("", reply).strip())
    for match in _BLOCK.finditer(reply):
        if len(parsed.calls) + len(parsed.errors) >= MAX_CALLS:
            parsed.errors.append(f"more than {MAX_CALLS} tool calls in one reply")
            break
        call, error = _parse_one(match.group(1))
        if call is not None:
            parsed.calls.append(call)
        else:
            parsed.errors.append(error)
    return parsed


def parse_call_list(action: object, *, max_calls: int = MAX_CALLS) -> ParsedReply:
    """Calls given as a list of `ToolCall`s, `{name, arguments}` dicts or OpenAI `{function: {...}}`
    dicts (arguments may be a JSON string); anything else becomes a parse error. Never raises."""
    if not isinstance(action, list | tuple):
        return ParsedReply(errors=[f"action must be reply text or a list of tool calls, got {type(action).__name__}"])
    parsed = ParsedReply()
    for item in action[:max_calls]:
        call, error = _call_from_object(item)
        if call is None:
            parsed.errors.append(error)
        else:
            parsed.calls.append(call)
    if len(action) > max_calls:
        parsed.errors.append(f"more than {max_calls} tool calls in one reply")
    return parsed


def _call_from_object(item: object) -> tuple[ToolCall | None, str]:
    if isinstance(item, ToolCall):
        return item, ""
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        item = item["function"]
    if not isinstance(item, dict):
        return None, f"a tool call must be an object with name and arguments, got {type(item).__name__}"
    arguments = item.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI-style JSON-encoded arguments
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None, "arguments are not a JSON object"
    try:
        return ToolCall.model_validate({"name": item.get("name"), "arguments": arguments}), ""
    except ValueError as exc:
        return None, f"invalid tool call: {str(exc).splitlines()[0][:120]}"


def _parse_one(payload: str) -> tuple[ToolCall | None, str]:
    text = payload.strip()
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"invalid JSON ({_short(exc)}): {_short(text)}"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object with name and arguments, got {type(obj).__name__}"
    name, arguments = obj.get("name"), obj.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None, f"arguments of {name!r} are not a JSON object"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return None, f"missing or invalid tool name: {_short(repr(name))}"
    if not isinstance(arguments, dict):
        return None, f"arguments of {name!r} must be a JSON object"
    return ToolCall(name=name, arguments=arguments), ""


def _short(value: object, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_tool_call(call: ToolCall) -> str:
    """The exact text a model should emit for `call` (used in demonstrations and oracle replies)."""
    return f"{OPEN}\n" + json.dumps({"name": call.name, "arguments": call.arguments}) + f"\n{CLOSE}"
