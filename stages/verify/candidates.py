"""A candidate task as verification sees it: the task its row describes, what replaying its solution
shows, and what its results hold.

A `candidates` row (written by abstraction) holds a query, a solution (calls) and answers; `candidate_task`
turns it into a `Task` whose checker the environment derives from that solution
(`Environment.derive_checker`). `replay_solution` runs the solution call by call with the state digests
around it; `read_answers` takes a read-only task's answers from its last result. The checks that use
them are in `stages.verify.checks`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.answers import answer_found
from coevolve.envs.base import (
    Environment,
    Evaluation,
    Task,
    TaskSynthesis,
    literal_values,
    synthesized_family,
)
from coevolve.llm.replies import short_text
from coevolve.stages.abstract.similarity import solution_signature

IDLE_REPLY = "Sorry, I cannot help with that."


MAX_READ_ANSWERS = 3
"""Most values of a read-only solution's last result taken as the answers of a task that names none."""


MAX_ANSWER_CHARS = 200


class Rejected(ValueError):
    """A candidate fails a check; the message is the verification's reason."""


def candidate_task(env: Environment, row: dict, *, strict: bool = True) -> Task:
    """The task a candidate row describes, with the checker `env` derives for it (Rejected as `replay` when
    the solution fails; `strict=False` never refuses, for the no-verification ablation)."""
    if not env.offers(TaskSynthesis):
        raise Rejected(f"replay: no verifiable checker for environment {env.name!r}: it derives none from a "
                       "solution (it does not offer the TaskSynthesis role)")
    calls = [ToolCall(**c) for c in json.loads(row["solution"])]
    state, turns, answers = json.loads(row["initial_state"]), [row["query"]], [json.loads(row["answers"])]
    try:
        checker = env.derive_checker(state, turns, [calls], answers, strict=strict)
    except ValueError as exc:
        raise Rejected(f"replay: {exc}") from None
    family = synthesized_family([c.name for c in calls])
    task_id = Task.make_id(row["env"], state, turns, {**checker, "solution": solution_signature(calls)})
    return Task(
        id=task_id,
        env=row["env"],
        split="synthesized",
        family=family,
        initial_state=state,
        turns=turns,
        solution=[calls],
        checker=checker,
        source="synthesized",
    )


def replay_solution(
    make_env: Callable[[], Environment], task: Task
) -> tuple[str | None, str | None, list[str]]:
    """(digest before, digest after, one result text per call); Rejected when a call fails."""
    env = make_env()
    try:
        env.reset(task)
        before, results = env.state_digest(), []
        for calls in task.solution or []:
            step = env.step(list(calls))
            records = step.info.get("calls", [])
            if len(records) != len(calls):
                raise Rejected(f"replay: {len(calls) - len(records)} call(s) did not run")
            for record, message in zip(records, step.messages, strict=False):
                if not record.get("ok"):
                    raise Rejected(
                        f"replay: {record.get('name')} failed: {short_text(record.get('error'), 200)}"
                    )
                results.append(message["content"])
        return before, env.state_digest(), results
    finally:
        env.close()


def idle_evaluation(make_env: Callable[[], Environment], task: Task) -> Evaluation:
    """The evaluation of an agent that answers every turn without calling a tool (`IDLE_REPLY`)."""
    env = make_env()
    try:
        env.reset(task)
        for _ in task.turns:
            if env.step(IDLE_REPLY).done:
                break
        return env.evaluate()
    finally:
        env.close()


def last_result(results: list[str]) -> Any:
    """The solution's last result as JSON (whatever text an environment appends after it, a tool-world
    note, left out), else its text."""
    text = results[-1] if results else ""
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except ValueError:
        return text


def result_objects(node: Any) -> list[dict]:
    """The innermost JSON objects of a result: those holding no object themselves (an account, an event)."""
    if isinstance(node, list):
        return [o for item in node for o in result_objects(item)]
    if isinstance(node, dict):
        inner = [o for value in node.values() for o in result_objects(value)]
        return inner or [node]
    return []


def read_answers(task: Task, results: list[str]) -> list[str]:
    """What a read-only task that names no answer asks for: the values of its last result that the query
    and the solution's arguments do not already name (Rejected when there is none or too many)."""
    value = last_result(results)
    known = "\n".join([*task.turns, *(json.dumps(c.arguments) for t in task.solution or [] for c in t)])
    new = [str(v) for v in dict.fromkeys(literal_values(value)) if not answer_found(str(v), known)]
    new = [v for v in new if v.strip() and len(v) <= MAX_ANSWER_CHARS]
    if not new:
        raise Rejected("no effect: the solution changes nothing, the task asks for no answer, and its last "
                       "result holds no value the query does not name")  # fmt: skip
    if len(new) > MAX_READ_ANSWERS:
        raise Rejected(f"no effect: the solution changes nothing, the task asks for no answer, and its last "
                       f"result holds {len(new)} new values (at most {MAX_READ_ANSWERS} are taken as the "
                       "answer)")  # fmt: skip
    return new
