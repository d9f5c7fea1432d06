"""Helpers of the tool-world tests (test_toolworld*.py): small split sizes, task lookups, call text."""

from __future__ import annotations

from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.llm.toolcalls import render_tool_call

SMALL = {"n_train": 60, "n_test": 30, "n_heldout": 24}


def one_task_per_family(env) -> dict[str, Task]:
    tasks = env.tasks("train") + env.tasks("heldout-templates")
    return {task.family: task for task in reversed(tasks)}


def tool_text(name: str, **arguments) -> str:
    return render_tool_call(ToolCall(name=name, arguments=arguments))


def bank_task(env) -> Task:
    return next(t for t in env.tasks("train") if t.family == "bank_balance")
