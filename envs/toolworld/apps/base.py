"""What every tool-world app shares: the `App` base class, `ToolError`, and argument checks.

An app owns one plain JSON-able dict (`App.state`) and exposes its tools as methods named in `TOOLS`.
The tool catalog (`envs.toolworld.tools`) reads their type-annotated signatures and Google-style
docstrings to build OpenAI function schemas, so a tool's docstring *is* its documentation for the agent.
A tool raises `ToolError` for invalid use (unknown file, insufficient funds, bad date); the catalog turns
the message into the observation "Error: ...". Nothing here is global: every episode builds its own apps.
"""

from __future__ import annotations

import datetime
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

MAX_TEXT_CHARS = 2000
MAX_AMOUNT = 10_000_000.0
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


class ToolError(Exception):
    """Invalid use of a tool; the message is shown to the agent as the tool's result."""


class App(ABC):
    """One stateful app: `state` is its JSON-able data, `TOOLS` the method names offered as tools."""

    name: ClassVar[str] = ""
    TOOLS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        if state is not None and not isinstance(state, dict):
            raise ValueError(f"state of app {self.name!r} must be a dict, got {type(state).__name__}")
        self.state: dict[str, Any] = self.empty_state()
        self.state.update(state or {})

    @classmethod
    @abstractmethod
    def empty_state(cls) -> dict[str, Any]:
        """The state of the app with no data (missing keys of a loaded state are filled from it)."""


def shown(value: Any, limit: int = 60) -> str:
    """A short, ASCII-safe rendering of an agent-supplied value for error messages."""
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_text(value: str, what: str) -> str:
    """Strip `value` and reject it when empty."""
    text = value.strip()
    if not text:
        raise ToolError(f"{what} must not be empty")
    return text


def check_amount(amount: float) -> float:
    """A positive money amount with at most 2 decimals, returned rounded to cents."""
    if not 0 < amount <= MAX_AMOUNT:
        raise ToolError(f"amount must be positive and at most {MAX_AMOUNT:.2f}, got {shown(amount)}")
    if abs(round(amount, 2) - amount) > 1e-9:
        raise ToolError(f"amount must have at most 2 decimals, got {shown(amount)}")
    return round(amount, 2)


def add_money(balance: float, delta: float) -> float:
    """Money arithmetic rounded to cents, so equal operations give equal floats."""
    return round(balance + delta, 2)


def check_date(text: str) -> str:
    """A date written YYYY-MM-DD."""
    try:
        if not _DATE.match(text):
            raise ValueError
        datetime.date.fromisoformat(text)
    except ValueError:
        raise ToolError(f"date must be written YYYY-MM-DD, e.g. 2025-03-14, got {shown(text)}") from None
    return text


def check_time(text: str) -> str:
    """A time of day written HH:MM (24 hours)."""
    if not _TIME.match(text):
        raise ToolError(f"time must be written HH:MM, e.g. 09:30, got {shown(text)}")
    return text


def next_id(prefix: str, existing: Iterable[str]) -> str:
    """`prefix-N` with N one above the largest numeric suffix among `existing` ids of that prefix."""
    numbers = [
        int(key.rpartition("-")[2])
        for key in existing
        if key.startswith(prefix + "-") and key.rpartition("-")[2].isdigit()
    ]
    return f"{prefix}-{max(numbers, default=0) + 1}"


def lookup(table: dict[str, Any], key: str, what: str) -> Any:
    """`table[key]`, or a ToolError naming the known keys when it is missing."""
    if key not in table:
        known = ", ".join(sorted(table)[:12]) or "none"
        raise ToolError(f"unknown {what} {shown(key)}; known: {known}")
    return table[key]
