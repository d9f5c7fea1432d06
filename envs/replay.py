"""Replay a task's reference solution through any environment, as an oracle agent would.

For each user turn: one step with the turn's reference calls, then a final reply that states the turn's
required answer values (`task.checker["answers"]`, when the environment uses that convention). Used by
tests and by verification to check that a task is solvable and its checker accepts the reference.
"""

from __future__ import annotations

from coevolve.envs.base import Environment, Evaluation, Task


def replay_reference(env: Environment, task: Task) -> Evaluation:
    """Reset `env` on `task`, play the reference solution turn by turn, and return `env.evaluate()`."""
    env.reset(task)
    solution = task.solution or []
    for turn in range(len(task.turns)):
        calls = solution[turn] if turn < len(solution) else []
        if calls:
            env.step(list(calls))
        result = env.step(final_answer(task, turn))
        if result.done:
            break
    return env.evaluate()


def final_answer(task: Task, turn: int) -> str:
    """The reference's closing reply of user turn `turn`: "Done." plus the values the turn must state."""
    answers = task.checker.get("answers") or []
    values = answers[turn] if turn < len(answers) else []
    return "Done. " + " ".join(str(v) for v in values) if values else "Done."
