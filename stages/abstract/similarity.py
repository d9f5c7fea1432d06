"""When two tasks are the same task: normalised solution signatures and query token overlap.

Abstraction marks near-duplicate candidates with them (same signature, similar query); verification
refuses a candidate that nearly duplicates a held-out evaluation task.
"""

from __future__ import annotations

import json
import re
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.base import Task

_TOKEN = re.compile(r"[a-z0-9]+")


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.lower().split())
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return round(float(value), 6)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in sorted(value.items())}
    return str(value)


def solution_signature(calls: list[ToolCall] | list[dict]) -> str:
    """Calls in order with case/space-normalised arguments: equal signatures = the same solution."""
    parts = []
    for call in calls:
        name, args = (
            (call.name, call.arguments) if isinstance(call, ToolCall) else (call["name"], call["arguments"])
        )
        parts.append(f"{name}({json.dumps(_normal(args), sort_keys=True)})")
    return " | ".join(parts)


def jaccard(a: str, b: str) -> float:
    x, y = set(_TOKEN.findall(a.lower())), set(_TOKEN.findall(b.lower()))
    return len(x & y) / len(x | y) if x | y else 1.0


def task_signature(task: Task) -> str:
    return solution_signature([c for turn in task.solution or [] for c in turn])
