"""Read the Python code out of an agent's action for AppWorld's `execute(code)` tool.

Accepted forms, checked in this order:
- a list of calls (`ToolCall`s or `{name, arguments}` dicts) of `execute` with a string `code`;
- reply text with Hermes/Qwen `<tool_call>{"name": "execute", "arguments": {"code": ...}}</tool_call>`;
- reply text with fenced code blocks (```python, ```py or a bare ```; an unclosed last fence runs to the
  end of the reply, as a reply cut by the token limit would be).
Several calls or blocks are joined in order into one program. The code is only extracted here: it is
sent to AppWorld's server, which runs it in its own sandboxed process; our process never runs it.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from coevolve.core import ToolCall
from coevolve.llm.toolcalls import MAX_REPLY_CHARS, OPEN, parse_tool_calls

TOOL_NAME = "execute"
MAX_CODE_CHARS = MAX_REPLY_CHARS
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass
class CodeAction:
    """The program to run ('' if none), why parts of the action were rejected, and the text around it."""

    code: str = ""
    errors: list[str] = field(default_factory=list)
    text: str = ""


def read_code(action: Any) -> CodeAction:
    """The code of `action`; never raises. No code and no errors means a reply of plain text."""
    if isinstance(action, list | tuple):
        return _from_calls(list(action))
    if not isinstance(action, str):
        kind = type(action).__name__
        return CodeAction(errors=[f"action must be reply text or a list of tool calls, got {kind}"])
    if len(action) > MAX_REPLY_CHARS:
        return CodeAction(errors=[f"reply too long ({len(action)} characters)"], text=action[:200])
    if OPEN in action:
        parsed = parse_tool_calls(action)
        result = _from_calls(parsed.calls)
        result.errors = [*parsed.errors, *result.errors]
        result.text = parsed.content
        return result
    blocks = [block.strip("\n") for block in _FENCE.findall(action)]
    code = "\n\n".join(block for block in blocks if block.strip())
    return CodeAction(code=code, text=_FENCE.sub("", action).strip())


def _from_calls(calls: list[Any]) -> CodeAction:
    result = CodeAction()
    codes = []
    for item in calls:
        name, arguments = _name_and_arguments(item)
        if name != TOOL_NAME:
            result.errors.append(f"unknown tool {str(name)[:40]!r}: the only tool is execute(code)")
        elif not isinstance(arguments.get("code"), str):
            result.errors.append("execute needs a string argument `code`")
        elif arguments["code"].strip():
            codes.append(arguments["code"])
    code = "\n\n".join(codes)
    if len(code) > MAX_CODE_CHARS:
        return CodeAction(errors=[*result.errors, f"code too long ({len(code)} characters)"])
    result.code = code
    return result


def _name_and_arguments(item: Any) -> tuple[Any, dict[str, Any]]:
    """Name and arguments of a `ToolCall`, a `{name, arguments}` dict or an OpenAI `{function: {...}}`."""
    if isinstance(item, ToolCall):
        return item.name, dict(item.arguments)
    if not isinstance(item, dict):
        return f"<{type(item).__name__}>", {}
    if isinstance(item.get("function"), dict):
        item = item["function"]
    arguments = item.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI-style JSON-encoded arguments
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            arguments = {}
    return item.get("name"), arguments if isinstance(arguments, dict) else {}


def code_literals(code: str) -> list[Any]:
    """The string and number literals a program states, in order: the values an agent must know to write
    it (`AppWorldEnv.argument_literals`). Read with `ast.parse`, never run. Left out: subscripts and slices
    (`result[0]`, `item["id"]`: they navigate a result), the text of f-strings, booleans and None. Code that
    does not parse states itself, whole."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return [code]
    navigation = {id(n) for node in ast.walk(tree) if isinstance(node, ast.Subscript)
                  for n in ast.walk(node.slice)}  # fmt: skip
    formatted = {id(n) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for n in ast.walk(node)}
    return [
        node.value for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and id(node) not in navigation | formatted
        and isinstance(node.value, str | int | float) and not isinstance(node.value, bool)
    ]  # fmt: skip
