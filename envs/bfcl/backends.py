"""Our executor for BFCL's backends: fresh instances per episode and a name-keyed dispatch table.

The official harness caches instances in a module's `globals()` and runs calls with `eval`; we do neither.
`Backends(scenario)` builds new instances of the task's involved classes, loads each from its
`initial_config` with `_load_scenario` as the harness does, and maps the name of every public method (no
leading `_`) to that instance's bound method. `run(call)` looks the name up in that dict only, checks the
arguments against the method's signature, the documented JSON types and a few resource limits, calls it,
and formats the result as the harness does (str as is, dict as `json.dumps`, else `str()`, an exception as
`Error during execution: <e>`). It never raises for any call content.
"""

from __future__ import annotations

import copy
import decimal
import functools
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.bfcl.parsing import value_problem

BFCL_CLASSES = (
    "GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI",
    "TicketAPI", "TradingBot", "TravelAPI", "VehicleControlAPI",
)  # fmt: skip
ERROR_PREFIX = "Error during execution: "
RESOURCE_LIMITS = {
    ("logarithm", "precision"): 1000,
    ("square_root", "precision"): 1000,
    ("power", "exponent"): 10_000,
}
"""Bounds on arguments that would otherwise let one call hang the process (mpmath / Decimal precision,
`base ** exponent`). The official executor has none; no ground-truth call comes near them."""

_PYTHON_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,),
}  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    """Where an episode's backends start: the involved classes and their initial configs."""

    involved_classes: tuple[str, ...]
    initial_config: Mapping[str, Any] = field(default_factory=dict)
    long_context: bool = False

    @classmethod
    def of(cls, initial_state: Mapping[str, Any]) -> Scenario:
        """Read a task's `initial_state` ({initial_config, involved_classes, long_context, ...})."""
        classes = tuple(initial_state.get("involved_classes") or ())
        unknown = [name for name in classes if name not in BFCL_CLASSES]
        if not classes or unknown:
            raise ValueError(f"involved_classes must be a non-empty subset of {BFCL_CLASSES}, got {classes}")
        return cls(
            classes, dict(initial_state.get("initial_config") or {}), bool(initial_state.get("long_context"))
        )


@dataclass(frozen=True)
class CallOutcome:
    """One executed call: the result string the harness would produce, and whether it was an error."""

    call: ToolCall
    content: str
    ok: bool

    def record(self) -> dict[str, Any]:
        """The entry for `StepResult.info["calls"]`."""
        key = "result" if self.ok else "error"
        return {"name": self.call.name, "arguments": self.call.arguments, "ok": self.ok, key: self.content}


def backend_class(class_name: str) -> type:
    """The backend class of BFCL's package for one of `BFCL_CLASSES`."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    if class_name not in BFCL_CLASSES:
        raise ValueError(f"unknown BFCL class {class_name!r}")
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


@functools.cache
def public_methods(cls: type) -> Mapping[str, inspect.Signature]:
    """Signature (without `self`) of every public method of a backend class, by name.

    Memoised per class (read-only metadata; `inspect.signature` would otherwise dominate `reset`)."""
    methods = {}
    for name, function in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_"):
            signature = inspect.signature(function)
            methods[name] = signature.replace(parameters=list(signature.parameters.values())[1:])
    return MappingProxyType(methods)


class Backends:
    """The live instances of one episode (or one checker run) and the calls they accept."""

    def __init__(
        self, scenario: Scenario, param_types: Mapping[str, Mapping[str, str]] | None = None
    ) -> None:
        """`param_types` ({function: {parameter: JSON type}}) turns on the documented-type check."""
        from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

        self.instances: dict[str, Any] = {}
        self._methods: dict[str, Callable[..., Any]] = {}
        self._signatures: dict[str, inspect.Signature] = {}
        self._param_types = param_types or {}
        for class_name in scenario.involved_classes:  # later classes win a name clash, as in the harness
            cls = backend_class(class_name)
            instance = cls()
            if class_name not in STATELESS_CLASSES:
                config = copy.deepcopy(dict(scenario.initial_config.get(class_name, {})))
                instance._load_scenario(config, long_context=scenario.long_context)
            self.instances[class_name] = instance
            for name, signature in public_methods(cls).items():
                self._methods[name] = getattr(instance, name)
                self._signatures[name] = signature

    def run(self, call: ToolCall) -> CallOutcome:
        """Execute `call` on this episode's instances; every failure is an outcome, never an exception."""
        method = self._methods.get(call.name)
        if method is None:
            return CallOutcome(call, f"{ERROR_PREFIX}unknown tool {call.name[:80]!r}", False)
        problem = self._argument_problem(call)
        if problem:
            return CallOutcome(call, ERROR_PREFIX + problem, False)
        try:
            with _isolated_precision():
                value = method(**copy.deepcopy(call.arguments))
                content = format_result(value)
        except Exception as exc:  # noqa: BLE001 - the harness turns any exception into a result string
            return CallOutcome(call, f"{ERROR_PREFIX}{_exception_text(exc)}", False)
        ok = not (isinstance(value, dict) and "error" in value)
        return CallOutcome(call, content, ok)

    def _argument_problem(self, call: ToolCall) -> str:
        """Why the arguments do not fit the signature, the documented types or the limits; '' if they do."""
        signature = self._signatures[call.name]
        params = signature.parameters
        for key in call.arguments:
            if key not in params:
                return f"{call.name}() got an unexpected keyword argument {key[:80]!r}"
        for name, param in params.items():
            if name not in call.arguments and param.default is inspect.Parameter.empty:
                return f"{call.name}() missing required argument {name!r}"
        documented = self._param_types.get(call.name, {})
        for key, value in call.arguments.items():
            problem = value_problem(value) or _type_problem(value, documented.get(key), params[key])
            if not problem:
                limit = RESOURCE_LIMITS.get((call.name, key))
                if limit is not None and isinstance(value, int | float) and abs(value) > limit:
                    problem = f"must be at most {limit} in absolute value"
            if problem:
                return f"argument {key!r} of {call.name} {problem}"
        return ""


def format_result(value: Any) -> str:
    """The harness's rendering of a return value: str as is, dict as JSON (else `str`), anything else `str`."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:  # noqa: BLE001 - the harness falls back to str() for unserialisable dicts
            return str(value)
    return str(value)


def _type_problem(value: Any, documented: Any, param: inspect.Parameter) -> str:
    """Top-level check against the documented JSON type; None is accepted where the parameter is optional."""
    if value is None and param.default is not inspect.Parameter.empty:
        return ""
    expected = _PYTHON_TYPES.get(documented or "")
    if expected is None or (
        isinstance(value, expected) and not (isinstance(value, bool) and bool not in expected)
    ):
        return ""
    got = "null" if value is None else type(value).__name__
    return f"must be of type {documented}, got {got}"


def _exception_text(exc: Exception) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose message itself fails (e.g. a 5000-digit int)
        return type(exc).__name__


@contextmanager
def _isolated_precision() -> Iterator[None]:
    """Keep MathAPI's process-wide precision changes (mpmath, decimal) inside one call."""
    mpmath = sys.modules.get("mpmath")
    dps = mpmath.mp.dps if mpmath is not None else None
    context = decimal.getcontext().copy()
    try:
        yield
    finally:
        decimal.setcontext(context)
        if mpmath is not None:
            mpmath.mp.dps = dps
