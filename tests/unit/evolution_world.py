"""The small tool world the evolution-phase tests share: its environment, task lookups, candidate rows.

The fixtures built on it (`world`, `explored`, `verified`) are in tests/unit/conftest.py.
"""

from __future__ import annotations

import json

from coevolve import envs
from coevolve.envs.base import Task

ENV_OPTIONS = {"seed": 0, "n_train": 40, "n_test": 8, "n_heldout": 8}


VALID = json.dumps(
    {"tools": ["get_balance", "teleport"], "apps": ["bank"], "diagnosis": "d", "plan": "read, then act"}
)
"""A valid exploration context naming one known tool and one unknown one."""


def make_env():
    return envs.make("toolworld", **ENV_OPTIONS)


def family(tasks: list[Task], name: str) -> Task:
    return next(t for t in tasks if t.family == name)


def candidate(
    task: Task, query: str, calls: list[dict], answers: list[str], cid: str, status: str = "ok"
) -> dict:
    """A `candidates` row over `task`'s initial state, as abstraction writes it."""
    return {
        "candidate_id": cid,
        "group_id": f"g-{cid}",
        "exploration_id": "x-signal",
        "task_id": task.id,
        "env": "toolworld",
        "status": status,
        "query": query,
        "solution": json.dumps(calls),
        "answers": json.dumps(answers),
        "initial_state": json.dumps(task.initial_state),
    }
