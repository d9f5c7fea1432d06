"""The tool catalog: OpenAI function schemas built from the apps' methods, argument checks, dispatch.

Each tool is an app method whose signature is type-annotated (str, int, float, bool) and whose
Google-style docstring gives a one-line description and one line per argument. `ToolCatalog` turns them
into `ToolSpec`s once per environment instance and dispatches a `ToolCall` only by looking its name up in
that table, restricted to the tools offered in the episode: model output never reaches `getattr`,
`eval` or a dunder. Arguments are checked against the schema first (unknown, missing, wrong JSON type,
too long), and every failure, including a tool raising, comes back as a `CallOutcome` with an error.
"""

from __future__ import annotations

import inspect
import json
import math
import typing
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.toolworld.apps import APP_CLASSES, App, ToolError
from coevolve.envs.toolworld.apps.base import MAX_TEXT_CHARS, shown

JSON_TYPES = MappingProxyType({str: "string", int: "integer", float: "number", bool: "boolean"})
MAX_INTEGER = 10**9
_JSON_NAMES = MappingProxyType(
    {bool: "boolean", str: "string", int: "integer", float: "number", list: "array", dict: "object"}
)


@dataclass(frozen=True)
class Param:
    """One documented, typed argument of a tool."""

    name: str
    json_type: str
    required: bool
    description: str


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its app, the (unbound) method that implements it, and its documentation."""

    name: str
    app: str
    function: Callable[..., Any]
    description: str
    params: tuple[Param, ...]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of the tool."""
        properties = {p.name: {"type": p.json_type, "description": p.description} for p in self.params}
        parameters = {
            "type": "object",
            "properties": properties,
            "required": [p.name for p in self.params if p.required],
        }
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def usage(self) -> str:
        """A one-line reminder of the signature, e.g. `get_balance(account_id: string)`."""
        args = ", ".join(
            f"{p.name}: {p.json_type}" + ("" if p.required else " (optional)") for p in self.params
        )
        return f"{self.name}({args})"


@dataclass(frozen=True)
class CallOutcome:
    """What one call produced: a JSON-able result, or an error message for the agent."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    result: Any = None
    error: str = ""
    note: str = ""
    """A warning that does not fail the call (e.g. arguments that were ignored)."""

    def content(self) -> str:
        """The text of the `tool` message the agent sees."""
        if not self.ok:
            return f"Error: {self.error}"
        return json.dumps(self.result) + (f"\nNote: {self.note}" if self.note else "")

    def record(self) -> dict[str, Any]:
        """The entry for `StepResult.info["calls"]`."""
        outcome = {"result": self.result} if self.ok else {"error": self.error}
        extra = {"note": self.note} if self.note else {}
        return {"name": self.name, "arguments": self.arguments, "ok": self.ok, **outcome, **extra}


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first line of a Google-style docstring and its `Args:` entries."""
    lines = inspect.cleandoc(doc).splitlines()
    described: dict[str, str] = {}
    in_args = False
    for line in lines[1:]:
        if line.strip() == "Args:":
            in_args = True
        elif in_args and ":" in line:
            name, _, text = line.strip().partition(":")
            described[name.strip()] = text.strip()
    return lines[0].strip(), described


def spec_of(app_cls: type[App], method_name: str) -> ToolSpec:
    """Build the spec of one tool from its signature and docstring; raises on undocumented parts."""
    function = getattr(app_cls, method_name)
    description, described = parse_docstring(function.__doc__ or "")
    hints = typing.get_type_hints(function)
    params = []
    for param in list(inspect.signature(function).parameters.values())[1:]:
        json_type = JSON_TYPES.get(hints.get(param.name))
        if json_type is None or param.name not in described:
            raise TypeError(
                f"{app_cls.__name__}.{method_name}: argument {param.name!r} needs a simple "
                "type annotation and an Args: line"
            )
        params.append(
            Param(param.name, json_type, param.default is inspect.Parameter.empty, described[param.name])
        )
    if not description:
        raise TypeError(f"{app_cls.__name__}.{method_name} needs a docstring")
    return ToolSpec(method_name, app_cls.name, function, description, tuple(params))


def type_error(value: Any, json_type: str) -> str | None:
    """Why `value` does not fit `json_type`, or None when it does."""
    if json_type == "string":
        if not isinstance(value, str):
            return f"must be a string, got {json_type_name(value)}"
        return (
            None
            if len(value) <= MAX_TEXT_CHARS
            else f"is too long ({len(value)} > {MAX_TEXT_CHARS} characters)"
        )
    if json_type == "boolean":
        return None if isinstance(value, bool) else f"must be true or false, got {json_type_name(value)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a {json_type}, got {json_type_name(value)}"
    if json_type == "integer" and not isinstance(value, int):
        return f"must be a whole number, got {shown(value)}"
    if (isinstance(value, int) and abs(value) > MAX_INTEGER) or not math.isfinite(value):
        return f"is out of range: {shown(value)}"
    return None


def json_type_name(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    return "null" if value is None else _JSON_NAMES.get(type(value), type(value).__name__)


def checked_arguments(spec: ToolSpec, arguments: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """The keyword arguments for the tool, or a ToolError naming the first mismatch with the schema.

    Unknown arguments are an error when `strict`; otherwise they are left out (the caller reports them).
    """
    known = {p.name for p in spec.params}
    unknown = [name for name in arguments if name not in known]
    if unknown and strict:
        raise ToolError(f"{spec.name} got unknown argument {shown(unknown[0])}; usage: {spec.usage()}")
    kwargs: dict[str, Any] = {}
    for param in spec.params:
        if param.name not in arguments:
            if param.required:
                raise ToolError(f"{spec.name} is missing argument {param.name!r}; usage: {spec.usage()}")
            continue
        problem = type_error(arguments[param.name], param.json_type)
        if problem:
            raise ToolError(f"argument {param.name!r} of {spec.name} {problem}")
        value = arguments[param.name]
        kwargs[param.name] = float(value) if param.json_type == "number" else value
    return kwargs


class ToolCatalog:
    """Every tool of the given apps, by name; build one per environment instance."""

    def __init__(self, app_classes: Iterable[type[App]] = APP_CLASSES, *, strict_arguments: bool = True) -> None:
        self.strict_arguments = strict_arguments
        """Reject calls with unknown arguments; else ignore those arguments and say so in the result,
        as JSON APIs that ignore unknown fields do."""
        specs = [spec_of(cls, name) for cls in app_classes for name in cls.TOOLS]
        self._specs = {spec.name: spec for spec in specs}
        if len(self._specs) != len(specs):
            raise ValueError("two apps define a tool with the same name")

    def names(self, apps: Collection[str] | None = None) -> list[str]:
        """Tool names of `apps` (all apps when None), in catalog order."""
        return [name for name, spec in self._specs.items() if apps is None or spec.app in apps]

    def spec(self, name: str) -> ToolSpec:
        return self._specs[name]

    def schemas(self, names: Iterable[str]) -> list[dict[str, Any]]:
        return [self._specs[name].schema() for name in names]

    def call(self, apps: typing.Mapping[str, App], call: ToolCall, offered: Collection[str]) -> CallOutcome:
        """Run `call` against `apps` if it names an offered tool; never raises for any call content."""
        spec = self._specs.get(call.name) if call.name in offered else None
        if spec is None:
            return _failure(call, f"unknown tool {shown(call.name)}; available: {', '.join(offered)}")
        try:
            kwargs = checked_arguments(spec, call.arguments, strict=self.strict_arguments)
            result = spec.function(apps[spec.app], **kwargs)
            result = json.loads(json.dumps(result))  # a detached, JSON-only copy: never aliases state
        except ToolError as exc:
            return _failure(call, str(exc))
        except Exception as exc:  # noqa: BLE001 - a broken tool or odd task state is data, not a crash
            return _failure(call, f"{spec.name} failed ({type(exc).__name__})")
        ignored = [name for name in call.arguments if name not in kwargs]
        note = f"ignored unknown argument(s) {', '.join(map(shown, ignored))}; usage: {spec.usage()}" if ignored else ""
        return CallOutcome(call.name, call.arguments, True, result=result, note=note)


def _failure(call: ToolCall, error: str) -> CallOutcome:
    return CallOutcome(call.name, call.arguments, False, error=error)
