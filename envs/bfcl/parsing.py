"""Decode an agent's action into tool calls: Hermes `<tool_call>` JSON, BFCL's python-list format, or a list.

BFCL's prompting format is a python list of calls, `[cd(folder='docs'), sort('final_report.pdf')]`. It is
parsed with `ast.parse` only: every element must be a call of a plain name (no attribute chains, no
`**kwargs`), every argument a literal (strings, numbers, booleans, None, lists, tuples, dicts with string
keys, checked node by node and then read with `ast.literal_eval`). Positional arguments are mapped to
parameter names with the signature table of the episode's backends, since BFCL's ground truth uses them.
Nothing is evaluated; whatever does not fit becomes a parse error, which the environment turns into an
error observation. Text that is not a python list holding a call (a final answer) is plain text, unless
it starts like one (`[name(`) and fails to parse. Whatever the form, a call whose argument values are not
small JSON-like data (`value_problem`: depth, size, types, magnitudes) becomes a parse error too.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from coevolve.core import ToolCall
from coevolve.llm.toolcalls import MAX_REPLY_CHARS, OPEN, ParsedReply, parse_call_list, parse_tool_calls

MAX_CALLS = 64
"""Calls per step in the python-list and list forms (a long_context ground-truth turn has 34); Hermes
replies keep `llm.toolcalls`' own cap of 16."""
MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_INT = 2**63
_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.UnaryOp, ast.USub, ast.UAdd, ast.Load)
_CALL_LIST = re.compile(r"\[\s*[A-Za-z_][A-Za-z0-9_.]*\s*\(")
"""How a reply that fails to parse must start, once bracketed, to count as a malformed call list (`[name(`);
other unparsable text, and lists without a call, are plain text (BFCL's decoder fails and ends the turn)."""

Signatures = Mapping[str, Sequence[str]]
"""Parameter names in positional order, by tool name."""


def read_action(action: Any, signatures: Signatures) -> ParsedReply:
    """Calls, parse errors and plain text of an action; never raises.

    A call whose arguments are not small JSON-like data (`value_problem`) becomes a parse error, so every
    recorded call can be snapshotted and replayed."""
    parsed = _read(action, signatures)
    calls, parsed.calls = parsed.calls, []
    for call in calls:
        problem = next(
            (
                f"argument {k[:40]!r} of {call.name[:40]} {p}"
                for k, v in call.arguments.items()
                if (p := value_problem(v))
            ),
            "",
        )
        if problem:
            parsed.errors.append(problem)
        else:
            parsed.calls.append(call)
    return parsed


def _read(action: Any, signatures: Signatures) -> ParsedReply:
    if isinstance(action, str):
        if OPEN in action:
            return parse_tool_calls(action)
        return parse_python_calls(action, signatures)
    return parse_call_list(action, max_calls=MAX_CALLS)


def value_problem(value: Any) -> str:
    """Why an argument value is not small JSON-like data (depth, size, types, magnitudes); '' if it is."""
    stack, count = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_NODES or depth > MAX_DEPTH:
            return f"is too large (over {MAX_NODES} values or {MAX_DEPTH} levels)"
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_INT:
                return "holds an integer out of range"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "holds a non-finite number"
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "holds a dictionary with non-string keys"
            stack.extend((v, depth + 1) for v in item.values())
        else:
            return f"has unsupported type {type(item).__name__}"
    return ""


def parse_python_calls(text: str, signatures: Signatures) -> ParsedReply:
    """Decode `[f(a=1), g('x')]` (brackets optional, as in BFCL); plain text if it is no list of calls."""
    if len(text) > MAX_REPLY_CHARS:
        return ParsedReply(errors=[f"reply too long ({len(text)} characters)"], content=text[:200])
    cleaned = _bracketed(text)
    body, error = _list_of_calls(cleaned)
    if error and _CALL_LIST.match(cleaned):
        return ParsedReply(errors=[error])
    if error or not any(isinstance(element, ast.Call) for element in body):
        return ParsedReply(content=text.strip())
    parsed = ParsedReply()
    for element in body[:MAX_CALLS]:
        call, error = call_from_node(element, signatures)
        if call is None:
            parsed.errors.append(error)
        else:
            parsed.calls.append(call)
    if len(body) > MAX_CALLS:
        parsed.errors.append(f"more than {MAX_CALLS} tool calls in one reply")
    return parsed


def parse_call_string(text: str, signatures: Signatures) -> ToolCall:
    """One call such as BFCL's ground truth `sort('final_report.pdf')`; raises ValueError if it is not one."""
    body, error = _list_of_calls(_bracketed(text))
    if error or len(body) != 1:
        raise ValueError(f"not a single call: {text!r}")
    call, error = call_from_node(body[0], signatures)
    if call is None:
        raise ValueError(f"{error}: {text!r}")
    return call


def _bracketed(text: str) -> str:
    """The reply as BFCL's decoder sees it: stripped of backticks, newlines and spaces, in brackets."""
    cleaned = text.strip("`\n ")
    if cleaned.startswith("python\n"):  # a fenced ```python block
        cleaned = cleaned[len("python\n") :].strip()
    if not cleaned.startswith("["):
        cleaned = "[" + cleaned
    if not cleaned.endswith("]"):
        cleaned += "]"
    return cleaned


def _list_of_calls(cleaned: str) -> tuple[list[ast.expr], str]:
    """The elements of the python list `cleaned`, or why it does not parse as one."""
    try:
        tree = ast.parse(cleaned, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return [], f"not a python list of calls ({type(exc).__name__}: {str(exc)[:80]})"
    if not isinstance(tree.body, ast.List):
        return [], "not a python list of calls"
    return list(tree.body.elts), ""


def call_from_node(node: ast.expr, signatures: Signatures) -> tuple[ToolCall | None, str]:
    """A ToolCall with named literal arguments from one `ast.Call` node, or the reason it is not one."""
    if not isinstance(node, ast.Call):
        return None, f"not a function call: {_shown(node)}"
    if not isinstance(node.func, ast.Name):
        return None, f"only plain function names can be called, not {_shown(node.func)}"
    name = node.func.id
    if node.args and name not in signatures:
        return None, f"unknown tool {name!r}"
    params = signatures.get(name, ())
    if len(node.args) > len(params):
        return None, f"{name} takes {len(params)} arguments, {len(node.args)} positional given"
    arguments: dict[str, Any] = {}
    for param, value_node in zip(params, node.args, strict=False):
        arguments[param] = value_node
    for keyword in node.keywords:
        if keyword.arg is None:
            return None, f"{name}: **kwargs are not allowed"
        if keyword.arg in arguments:
            return None, f"{name} got multiple values for argument {keyword.arg!r}"
        arguments[keyword.arg] = keyword.value
    values = {}
    for key, value_node in arguments.items():
        value, error = literal_value(value_node)
        if error:
            return None, f"argument {key!r} of {name}: {error}"
        values[key] = value
    return ToolCall(name=name, arguments=values), ""


def literal_value(node: ast.expr) -> tuple[Any, str]:
    """The value of a literal node (tuples become lists), or why it is not an allowed literal."""
    problem = _literal_problem(node)
    if problem:
        return None, problem
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        return None, f"not a literal ({type(exc).__name__})"
    return _lists(value), ""


def _literal_problem(root: ast.expr) -> str:
    """Why `root` is not a small JSON-like literal; empty when it is."""
    stack, count = [(root, 0)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES or depth > MAX_DEPTH:
            return f"literal too large (over {MAX_NODES} nodes or {MAX_DEPTH} levels)"
        if not isinstance(node, _LITERAL_NODES):
            return f"only literal values are allowed, not {type(node).__name__}"
        if isinstance(node, ast.Constant) and not _plain_constant(node.value):
            return f"unsupported constant {_shown(node)}"
        if isinstance(node, ast.UnaryOp) and not (
            isinstance(node.op, ast.USub | ast.UAdd)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float)
        ):
            return "only a sign in front of a number is allowed"
        if isinstance(node, ast.Dict) and not all(
            isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys
        ):
            return "dictionary keys must be strings"
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return ""


def _plain_constant(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= MAX_INT
    return value is None or isinstance(value, str | bool | float)


def _lists(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


def _shown(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - unparse of odd trees is only for the message
        text = type(node).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
