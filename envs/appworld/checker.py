"""The checker of a synthesized AppWorld task: AppWorld's own tests of its world, and the answer.

AppWorld judges a task by the database changes the episode made (compared with the start of the world)
and the answer passed to `apis.supervisor.complete_task`; its server runs those tests (`/evaluate`) but
shows no database over HTTP. A synthesized task has no tests of its own, so its checker is what AppWorld's
tests of the task's world report after the reference solution ran and completed: per test, passed or not,
and a digest of a failure's trace (which states the database changes or the answer it saw). An episode
satisfies the checker when those tests report the same (`tests_of`), and its answer states every required
value (`answer_found`). A solution whose effect no test of its world observes, and that asks for no
answer, has nothing to check: `derive_checker` refuses it (an idle answer would pass).

The answer is read from the episode's code (`answer_of`): a literal passed to `complete_task`; an answer
computed in the sandbox (`answer=total`) cannot be read from here and states nothing.
"""

from __future__ import annotations

import ast
from typing import Any

from coevolve.core import content_hash
from coevolve.envs.answers import answer_found

COMPLETE_TASK = "apis.supervisor.complete_task()"
"""What completes a world whose code did not: a synthesized task is judged on its completed world."""


def tests_of(report: Any) -> list[dict[str, Any]]:
    """AppWorld's tests in a report (`/evaluate`), sorted: requirement, passed, and a failure's trace digest."""
    if not isinstance(report, dict) or not isinstance(report.get("passes"), list):
        raise ValueError(f"unexpected AppWorld evaluation report: {report!r:.200}")
    tests = [{"requirement": _requirement(t), "passed": True, "trace": None} for t in report["passes"]]
    tests += [
        {"requirement": _requirement(t), "passed": False,
         "trace": content_hash(t.get("trace")) if isinstance(t, dict) and t.get("trace") else None}
        for t in report.get("failures") or []
    ]  # fmt: skip
    return sorted(tests, key=lambda t: (t["requirement"], t["passed"], t["trace"] or ""))


def _requirement(test: Any) -> str:
    return str(test.get("requirement", "")) if isinstance(test, dict) else str(test)


def answer_of(code: str) -> str | None:
    """The answer `code` passes to `apis.supervisor.complete_task` as a literal (`answer=` or first
    argument), as text; None when it passes none or computes it (the sandbox alone knows its value)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "apis.supervisor.complete_task":
            argument = next((k.value for k in node.keywords if k.arg == "answer"), None)
            argument = argument if argument is not None else (node.args[0] if node.args else None)
            if argument is None:
                return None
            try:
                value = ast.literal_eval(argument)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                return None
            return None if value is None else str(value)
    return None


def judge(checker: dict[str, Any], report: Any, answer: str | None) -> tuple[list[str], int]:
    """(what the episode misses, how many checks there are): the tests reporting otherwise than after the
    reference, and the required answer values its answer does not state."""
    expected, seen = checker["world_tests"], tests_of(report)
    missed = [f"test {t['requirement'][:150]!r}" for t in expected if t not in seen]
    missed += [f"test {t['requirement'][:150]!r} (not in the reference's)" for t in seen if t not in expected]
    required = [str(v) for turn in checker.get("answers") or [] for v in turn]
    missed += [f"answer {v[:80]!r}" for v in required if not answer_found(v, answer)]
    return missed, len(expected) + len(required)
