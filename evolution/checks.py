"""Verification's environment checks of one candidate task (step 6 of the loop, before any policy attempt).

`check_candidate` turns a candidate row into a task (its checker derived by replaying the solution) and
applies the checks in order; the first failure raises `Rejected` with the verification's reason:
contamination (a near-duplicate of a held-out task), replay (every call runs), effect (the solution
changes the state or reads what the task asks for; a read-only one must ask a question, and for no
action; a question that names no answer asks for what its last call reads), leaked and misread answers,
solvability (every argument appears in the query or an earlier result), grounding (the query's literals
are used or read), and the reference solution satisfying the derived checker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coevolve.core import ToolCall
from coevolve.envs.base import Environment, Evaluation, Task
from coevolve.envs.replay import replay_reference
from coevolve.envs.toolworld.checker import answer_found
from coevolve.evolution.queries import asks_for_information, query_literals, requested_action
from coevolve.evolution.similarity import jaccard, solution_signature, task_signature
from coevolve.llm.replies import short_text

if TYPE_CHECKING:
    from coevolve.evolution.verification import VerifySettings


CONTAMINATION = "contamination"


IDLE_REPLY = "Sorry, I cannot help with that."


MAX_READ_ANSWERS = 3
"""Most values of a read-only solution's last result taken as the answers of a task that names none."""


MAX_ANSWER_CHARS = 200


_NUMBER_TEXT = re.compile(r"^-?\d[\d,]*(?:\.\d+)?$")
"""An answer that is a plain number (`1,631.10`, `-3`, `42`)."""


class Rejected(ValueError):
    """A candidate fails a check; the message is the verification's reason."""


@dataclass
class Checked:
    """A candidate that passed the environment checks, waiting for the policy's attempts."""

    row: dict
    task: Task
    expected_digest: str | None
    read_answers: tuple[str, ...] = ()
    """Answers taken from the solution's last result (the teacher named none), else empty."""
    dropped_answers: tuple[str, ...] = ()
    """Answers the teacher named for a state-changing task whose query asks for none (not required)."""
    idle_credit: float = 0.0
    """What an idle answer achieves of the task (`Evaluation.outcome_credit`): a failed attempt is
    retained only above it."""


def derive_checker(
    env: str,
    initial_state: dict,
    turns: list[str],
    solution: list[list[ToolCall]],
    answers: list[list[str]],
    *,
    strict: bool = True,
) -> dict[str, Any]:
    """The verifiable checker spec of a synthesized task (raises ValueError when its solution fails,
    unless `strict` is False)."""
    if env == "toolworld":
        from coevolve.envs.toolworld.checker import build_checker
        from coevolve.envs.toolworld.tools import ToolCatalog

        return build_checker(ToolCatalog(), initial_state, turns, solution, answers, strict=strict)
    if env == "bfcl":  # BfclEnv scores a task without `ground_truth` against its solution
        return {"category": "synthesized", "answers": answers}
    raise ValueError(f"no verifiable checker for environment {env!r} (supported: toolworld, bfcl)")


def candidate_task(row: dict, *, strict: bool = True) -> Task:
    """The task a candidate row describes, with its derived checker (Rejected when that fails)."""
    calls = [ToolCall(**c) for c in json.loads(row["solution"])]
    state, turns, answers = json.loads(row["initial_state"]), [row["query"]], [json.loads(row["answers"])]
    try:
        checker = derive_checker(row["env"], state, turns, [calls], answers, strict=strict)
    except ValueError as exc:
        raise Rejected(f"replay: {exc}") from None
    family = "synth:" + "+".join(dict.fromkeys(c.name for c in calls))
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


def _digest(env: Environment) -> str | None:
    digest = getattr(env, "state_digest", None)
    return digest() if digest is not None else None


def replay_solution(
    make_env: Callable[[], Environment], task: Task
) -> tuple[str | None, str | None, list[str]]:
    """(digest before, digest after, one result text per call); Rejected when a call fails."""
    env = make_env()
    try:
        env.reset(task)
        before, results = _digest(env), []
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
        return before, _digest(env), results
    finally:
        env.close()


def _literals(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _literals(v)]
    if isinstance(value, list):
        return [x for v in value for x in _literals(v)]
    return [] if value is None or isinstance(value, bool) else [value]


def check_solvable(task: Task, results: list[str]) -> None:
    """Every literal argument appears in the query or an earlier result of the solution (else Rejected)."""
    query = "\n".join(task.turns)
    calls = [c for turn in task.solution or [] for c in turn]
    for i, call in enumerate(calls):
        seen = "\n".join([query, *results[:i]])
        for value in _literals(call.arguments):
            text = value if isinstance(value, str) else json.dumps(value)
            found = answer_found(text, seen) if not isinstance(value, str) else text.lower() in seen.lower()
            if not found:
                raise Rejected(
                    f"unsolvable: argument {short_text(text, 80)} of {call.name} appears neither in "
                    "the query nor in an earlier result"
                )


def check_effect(task: Task, before: str | None, after: str | None, results: list[str]) -> None:
    """The solution changes the state or reads every answer the task asks for (else Rejected)."""
    answers = [a for turn in task.checker.get("answers") or [] for a in turn]
    missing = [a for a in answers if not answer_found(a, "\n".join(results))]
    if missing:
        raise Rejected(f"replay: answer {short_text(missing[0], 80)} appears in no result of the solution")
    if not answers and before is not None and before == after:
        raise Rejected("no effect: the solution changes nothing and the task asks for no answer")


def check_answers_asked(task: Task) -> None:
    """A text answer the query itself states is not asked for (Rejected as `leaked`): "Read /work/budget.txt
    and tell me the ticket number: pepper-4916." gives its answer away. Numbers are left alone: a count or
    an amount may equal a quantity the query names."""
    query = "\n".join(task.turns)
    for answer in (str(a) for turn in task.checker.get("answers") or [] for a in turn):
        if not _NUMBER_TEXT.match(answer) and answer_found(answer, query):
            raise Rejected(f"leaked: answer {short_text(answer, 60)} is stated in the query")


def last_result(results: list[str]) -> Any:
    """The solution's last result as JSON (whatever text an environment appends after it, a tool-world
    note, left out), else its text."""
    text = results[-1] if results else ""
    try:
        return json.JSONDecoder().raw_decode(text)[0]
    except ValueError:
        return text


def read_answers(task: Task, results: list[str]) -> list[str]:
    """What a read-only task that names no answer asks for: the values of its last result that the query
    and the solution's arguments do not already name (Rejected when there is none or too many)."""
    value = last_result(results)
    known = "\n".join([*task.turns, *(json.dumps(c.arguments) for t in task.solution or [] for c in t)])
    new = [str(v) for v in dict.fromkeys(_literals(value)) if not answer_found(str(v), known)]
    new = [v for v in new if v.strip() and len(v) <= MAX_ANSWER_CHARS]
    if not new:
        raise Rejected("no effect: the solution changes nothing, the task asks for no answer, and its last "
                       "result holds no value the query does not name")  # fmt: skip
    if len(new) > MAX_READ_ANSWERS:
        raise Rejected(f"no effect: the solution changes nothing, the task asks for no answer, and its last "
                       f"result holds {len(new)} new values (at most {MAX_READ_ANSWERS} are taken as the "
                       "answer)")  # fmt: skip
    return new


def _objects(node: Any) -> list[dict]:
    """The innermost JSON objects of a result: those holding no object themselves (an account, an event)."""
    if isinstance(node, list):
        return [o for item in node for o in _objects(item)]
    if isinstance(node, dict):
        inner = [o for value in node.values() for o in _objects(value)]
        return inner or [node]
    return []


def check_named_object(task: Task, results: list[str]) -> None:
    """Where the query names one object of the solution's last result ("What is the balance of CHK-8?" over
    a list of accounts), an answer found only among another object's values is a misread (Rejected): a
    small teacher copies the first balance it sees, and the policy, answering the question asked, fails."""
    answers = [str(a) for turn in task.checker.get("answers") or [] for a in turn]
    literals = {v.lower() for v in query_literals("\n".join(task.turns))}
    objects = _objects(last_result(results))
    named = [i for i, o in enumerate(objects) if any(str(v).lower() in literals for v in o.values())]
    if not answers or len(named) != 1:
        return
    texts = ["\n".join(json.dumps(v) for v in o.values()) for o in objects]
    own, others = texts[named[0]], texts[: named[0]] + texts[named[0] + 1 :]
    for answer in answers:
        if not answer_found(answer, own) and any(answer_found(answer, text) for text in others):
            raise Rejected(f"misread: answer {short_text(answer, 60)} is another object's value than the one "
                           "the query names")  # fmt: skip


def check_grounded(task: Task, results: list[str], least: float) -> None:
    """At least the share `least` of the literals the query names appear in the solution's arguments or
    results (else Rejected)."""
    used = "\n".join([*(json.dumps(c.arguments) for t in task.solution or [] for c in t), *results])
    literals = query_literals("\n".join(task.turns))
    missing = [v for v in literals if not answer_found(v, used)]
    if literals and (len(literals) - len(missing)) / len(literals) < least:
        named = ", ".join(short_text(v, 40) for v in missing[:3])
        raise Rejected(f"ungrounded: the query names {named}, which the solution neither uses nor reads "
                       f"({len(literals) - len(missing)} of {len(literals)} literals grounded)")  # fmt: skip


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


def contamination(task: Task, held_out: list[tuple[str, str, str]], threshold: float) -> str | None:
    """The id of a held-out task this one nearly duplicates, if any."""
    signature, query = task_signature(task), " ".join(task.turns)
    for sig, other_query, ident in held_out:
        if sig == signature or jaccard(query, other_query) >= threshold:
            return ident
    return None


def check_candidate(
    make_env: Callable[[], Environment],
    row: dict,
    held_out: list[tuple[str, str, str]],
    settings: VerifySettings,
) -> Checked:
    """All environment checks of one candidate, in order; Rejected(reason) on the first failure."""
    # An instruction asks for no answer: the teacher's are dropped before the checker is derived, which
    # would reject one that no result shows ("Transfer 450.61 from EMG-2 to SAV-4." with answer 1631.1).
    dropped = [] if asks_for_information(row["query"]) else [str(a) for a in json.loads(row["answers"] or "[]")]
    task = candidate_task({**row, "answers": "[]"} if dropped else row)
    twin = contamination(task, held_out, settings.contamination_jaccard)
    if twin is not None:
        raise Rejected(f"{CONTAMINATION}: near-duplicate of held-out task {twin}")
    before, after, results = replay_solution(make_env, task)
    derived: list[str] = []
    if before is not None and before == after:  # read-only: it must ask for what it reads, and only that
        if not asks_for_information(task.turns[-1]):
            raise Rejected("no effect: the solution changes nothing, and the query asks neither a question nor "
                           "for information (a read-only solution of an instruction is a mismatched pair)")
        action = requested_action(task.turns[-1])
        if action is not None:
            raise Rejected(f"no effect: the solution changes nothing, but the query asks for an action "
                           f"({action!r}; a read-only solution of an instruction is a mismatched pair)")
        if not any(task.checker.get("answers") or []):
            derived = read_answers(task, results)
            task = candidate_task({**row, "answers": json.dumps(derived)})
    check_effect(task, before, after, results)
    check_answers_asked(task)
    check_named_object(task, results)
    check_solvable(task, results)
    check_grounded(task, results, settings.grounding)
    env = make_env()
    try:
        evaluation = replay_reference(env, task)
    finally:
        env.close()
    if not evaluation.success:
        raise Rejected("checker: the reference solution does not satisfy the derived checker")
    return Checked(row, task, after, tuple(derived), tuple(dropped),
                   idle_evaluation(make_env, task).outcome_credit)
