"""Task templates: named functions from a seeded `random.Random` to a `Draft` of one task.

A draft holds the world (`initial_state`, only the apps the task involves), the user turns, the
reference tool calls per turn and the answer values each turn's final reply must contain. Template
authors follow three rules that keep tasks learnable by a small model: every literal argument of the
solution is quoted in a user turn or shown by an earlier tool result; tool and argument names are the
obvious ones; phrasings vary but stay short. `envs.toolworld.tasks` turns drafts into `Task`s.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coevolve.core import ToolCall


@dataclass(frozen=True)
class Draft:
    """One generated task before its checker is computed."""

    initial_state: dict[str, Any]
    turns: list[str]
    solution: list[list[ToolCall]]
    answers: list[list[str]]


@dataclass(frozen=True)
class Template:
    """A task family: its name (the task's `family`) and its generator."""

    name: str
    build: Callable[[random.Random], Draft]


def call(tool: str, /, **arguments: Any) -> ToolCall:
    """A reference tool call (`tool` is positional-only, so a tool may take an argument called `name`)."""
    return ToolCall(name=tool, arguments=arguments)


def phrase(rng: random.Random, options: tuple[str, ...], **values: Any) -> str:
    """One of several phrasings, filled in."""
    return rng.choice(options).format(**values)
