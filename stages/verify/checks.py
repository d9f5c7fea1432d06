"""Verification's environment checks of one candidate task (step 6 of the loop, before any policy attempt).

The checks are data: `CHECKS`, a tuple of small named functions applied in order by `check_candidate`.
Each does one job on a `Draft` (what the checks have learnt of the candidate so far: its row, its task,
the replay's digests and results, the answers dropped or read): it either fills a field in or raises
`Rejected(reason)`, the first of which ends the candidate's verification with that reason. In order:

1. `drop_unasked_answers`: an instruction asks for no answer, so the teacher's are not required.
2. `derive_task`: the task the row describes, its checker derived by the environment (`replay`).
3. `not_contaminated`: not a near-duplicate of a held-out task, by solution or query (`contamination`).
4. `replay`: every solution call runs; the state digests around the solution and its results.
5. `read_only_asks_a_question`, 6. `read_only_asks_no_action`: a solution that changes nothing must
   answer a question, and its query ask for no action (a mismatched pair otherwise: `no effect`).
7. `changing_is_asked_for`: the converse, a solution that changes the state comes with a query that asks
   for an action, or at least not only for information (`unasked effect`).
8. `read_only_reads_its_answers`: a read-only task that names no answer asks for what it reads.
9. `checks_nothing_held_out`: not the answers of a held-out task in its world, nor its final state
   (`contamination`).
10. `answers_in_results`, 11. `has_effect`: every answer appears in a result; the solution changes the
    state or answers something.
12. `answers_not_leaked`: a text answer is not stated by the query itself (`leaked`).
13. `answers_of_the_named_object`: an answer read off another object than the query names (`misread`).
14. `solvable`: every value a call needs (an argument, or a literal in code) appears in the query or an
    earlier result (`unsolvable`).
15. `grounded`: the query's literals are used or read by the solution (`ungrounded`).
16. `reference_satisfies_checker`: the reference solution, played as an agent would, passes the derived
    checker (`checker`). Under `verify.judge: execution` this is the verdict's execution: a reference that
    fails its checker but does more of the task than an idle answer is kept, to be retained.

What the English query asks for is read by `stages.verify.queries`; replaying and reading results is in
`stages.verify.candidates`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field

from coevolve.contracts.verify import VerdictReason, add_reason, remove_reason
from coevolve.envs.answers import answer_found
from coevolve.envs.base import Environment, Task
from coevolve.envs.replay import replay_reference
from coevolve.llm.replies import short_text
from coevolve.stages.verify.candidates import (
    Rejected,
    candidate_task,
    idle_evaluation,
    last_result,
    read_answers,
    replay_solution,
    result_objects,
)
from coevolve.stages.verify.contamination import HeldOut
from coevolve.stages.verify.queries import asks_for_information, query_literals, requested_action
from coevolve.stages.verify.settings import VerifySettings

CONTAMINATION = "contamination"


_NUMBER_TEXT = re.compile(r"^-?\d[\d,]*(?:\.\d+)?$")
"""An answer that is a plain number (`1,631.10`, `-3`, `42`)."""


@dataclass(frozen=True)
class CheckContext:
    """What every check may use: the environment, the held-out tasks and the settings."""

    make_env: Callable[[], Environment]
    held_out: HeldOut
    """The held-out tasks, indexed for the contamination guard."""
    settings: VerifySettings


@dataclass
class Draft:
    """What the checks have learnt of one candidate so far; a check reads it and may fill a field in."""

    row: dict
    """The `candidates` row, as abstraction wrote it."""
    derived: Task | None = None
    """The task the row describes (`derive_task`), rederived when its answers are read."""
    dropped: tuple[str, ...] = ()
    """Answers the teacher named for a task whose query asks for none (not required)."""
    read: tuple[str, ...] = ()
    """Answers taken from the solution's last result (the teacher named none)."""
    before: str | None = None
    """State digest before the solution (None: the environment keeps none)."""
    after: str | None = None
    results: list[str] = field(default_factory=list)
    """One result text per solution call."""
    call_literals: list[list] = field(default_factory=list)
    """Per solution call, the values an agent must know to make it (`Environment.argument_literals`)."""
    executed: bool = True
    """The reference solution, played as an agent would, satisfied the checker (`reference_satisfies_checker`)."""
    executed_credit: float = 1.0
    """What of the task the reference's play achieved (`Evaluation.outcome_credit`)."""

    @property
    def task(self) -> Task:
        if self.derived is None:
            raise RuntimeError("no task yet: `derive_task` runs before the checks that read it")
        return self.derived

    @property
    def read_only(self) -> bool:
        """The solution changed nothing (known only where the environment keeps state digests)."""
        return self.before is not None and self.before == self.after

    @property
    def answers(self) -> list[str]:
        """The answers the task's checker requires, all turns together."""
        return [a for turn in self.task.checker.get("answers") or [] for a in turn]


Check = Callable[[CheckContext, Draft], None]


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
    executed: bool = True
    """The reference solution satisfied the checker when executed (False: it did only part of the task,
    above an idle answer; possible under `verify.judge: execution` only)."""
    executed_credit: float = 1.0
    """What of the task the executed reference solution achieved."""


def _derive(ctx: CheckContext, row: dict) -> tuple[Task, list[list]]:
    """The task `row` describes, and per call of its solution the values an agent must know to make it."""
    with closing(ctx.make_env()) as env:
        task = candidate_task(env, row)
        return task, [env.argument_literals(call) for turn in task.solution or [] for call in turn]


def drop_unasked_answers(ctx: CheckContext, d: Draft) -> None:
    """An instruction asks for no answer: the teacher's are dropped before the checker is derived, which
    would reject one that no result shows ("Transfer 450.61 from EMG-2 to SAV-4." with answer 1631.1)."""
    if not asks_for_information(d.row["query"]):
        d.dropped = tuple(str(a) for a in json.loads(d.row["answers"] or "[]"))


def derive_task(ctx: CheckContext, d: Draft) -> None:
    """The task the row describes, its checker derived by the environment from the solution (Rejected as
    `replay` when a call fails or an answer appears in no result)."""
    d.derived, d.call_literals = _derive(ctx, {**d.row, "answers": "[]"} if d.dropped else d.row)


def not_contaminated(ctx: CheckContext, d: Draft) -> None:
    """The task is no near-duplicate of a held-out task (its solution, or its query by Jaccard similarity)."""
    twin = ctx.held_out.near_duplicate(d.task, ctx.settings.contamination_jaccard)
    if twin is not None:
        raise Rejected(f"{CONTAMINATION}: {twin}")


def checks_nothing_held_out(ctx: CheckContext, d: Draft) -> None:
    """The task checks nothing a held-out task checks: not the same answers in the same world, and (for a
    solution that changes the state) not the same final state (`contamination.HeldOut.same_check`)."""
    twin = ctx.held_out.same_check(d.task, after=d.after, read_only=d.read_only)
    if twin is not None:
        raise Rejected(f"{CONTAMINATION}: {twin}")


def replay(ctx: CheckContext, d: Draft) -> None:
    """Every call of the solution runs (else Rejected); keeps the state digests around it and its results."""
    d.before, d.after, d.results = replay_solution(ctx.make_env, d.task)


def read_only_asks_a_question(ctx: CheckContext, d: Draft) -> None:
    """A solution that changes nothing must answer a question, or a request for information."""
    if d.read_only and not asks_for_information(d.task.turns[-1]):
        raise Rejected("no effect: the solution changes nothing, and the query asks neither a question nor "
                       "for information (a read-only solution of an instruction is a mismatched pair)")  # fmt: skip


def read_only_asks_no_action(ctx: CheckContext, d: Draft) -> None:
    """The query of a solution that changes nothing asks for no action in any clause ("Buy ... and tell me
    the total." over a read)."""
    action = requested_action(d.task.turns[-1]) if d.read_only else None
    if action is not None:
        raise Rejected(f"no effect: the solution changes nothing, but the query asks for an action "
                       f"({action!r}; a read-only solution of an instruction is a mismatched pair)")  # fmt: skip


def changing_is_asked_for(ctx: CheckContext, d: Draft) -> None:
    """A solution that changes the state answers a query that asks for it: a query whose every turn only
    asks for information ("Please tell me the title of the event 'E-1'." over `cancel_event`) is a mismatched
    pair (Rejected as `unasked effect`). Its reference satisfies its own checker, so execution would accept
    it, yet an agent that does what it is asked fails: the checker wants the state the change leaves."""
    if d.read_only or d.before is None:
        return
    if all(asks_for_information(t) and requested_action(t) is None for t in d.task.turns):
        raise Rejected("unasked effect: the solution changes the state, but the query only asks for information "
                       "(a state change nobody asked for is a mismatched pair)")  # fmt: skip


def read_only_reads_its_answers(ctx: CheckContext, d: Draft) -> None:
    """A read-only task that names no answer asks for what its last call reads: those values become its
    answers (`read_answers`, Rejected when there is none or too many) and its checker is derived again."""
    if d.read_only and not any(d.task.checker.get("answers") or []):
        d.read = tuple(read_answers(d.task, d.results))
        d.derived, d.call_literals = _derive(ctx, {**d.row, "answers": json.dumps(list(d.read))})


def answers_in_results(ctx: CheckContext, d: Draft) -> None:
    """Every answer the task asks for appears in a result of its solution (else Rejected)."""
    missing = [a for a in d.answers if not answer_found(a, "\n".join(d.results))]
    if missing:
        raise Rejected(f"replay: answer {short_text(missing[0], 80)} appears in no result of the solution")


def has_effect(ctx: CheckContext, d: Draft) -> None:
    """The solution changes the state or the task asks for an answer (else Rejected)."""
    if not d.answers and d.read_only:
        raise Rejected("no effect: the solution changes nothing and the task asks for no answer")


def answers_not_leaked(ctx: CheckContext, d: Draft) -> None:
    """A text answer the query itself states is not asked for (Rejected as `leaked`): "Read /work/budget.txt
    and tell me the ticket number: pepper-4916." gives its answer away. Numbers are left alone: a count or
    an amount may equal a quantity the query names."""
    query = "\n".join(d.task.turns)
    for answer in (str(a) for a in d.answers):
        if not _NUMBER_TEXT.match(answer) and answer_found(answer, query):
            raise Rejected(f"leaked: answer {short_text(answer, 60)} is stated in the query")


def answers_of_the_named_object(ctx: CheckContext, d: Draft) -> None:
    """Where the query names one object of the solution's last result ("What is the balance of CHK-8?" over
    a list of accounts), an answer found only among another object's values is a misread (Rejected): a
    small teacher copies the first balance it sees, and the policy, answering the question asked, fails."""
    answers, literals = [str(a) for a in d.answers], {v.lower() for v in query_literals("\n".join(d.task.turns))}
    objects = result_objects(last_result(d.results))
    named = [i for i, o in enumerate(objects) if any(str(v).lower() in literals for v in o.values())]
    if not answers or len(named) != 1:
        return
    texts = ["\n".join(json.dumps(v) for v in o.values()) for o in objects]
    own, others = texts[named[0]], texts[: named[0]] + texts[named[0] + 1 :]
    for answer in answers:
        if not answer_found(answer, own) and any(answer_found(answer, text) for text in others):
            raise Rejected(f"misread: answer {short_text(answer, 60)} is another object's value than the one "
                           "the query names")  # fmt: skip


def solvable(ctx: CheckContext, d: Draft) -> None:
    """Every value an agent must know to make a call of the solution (`Environment.argument_literals`: a
    literal argument, or a literal inside an argument that is code) appears in the query or an earlier
    result of the solution (else Rejected)."""
    query = "\n".join(d.task.turns)
    calls = [c for turn in d.task.solution or [] for c in turn]
    for i, (call, literals) in enumerate(zip(calls, d.call_literals, strict=True)):
        seen = "\n".join([query, *d.results[:i]])
        for value in literals:
            text = value if isinstance(value, str) else json.dumps(value)
            found = answer_found(text, seen) if not isinstance(value, str) else text.lower() in seen.lower()
            if not found:
                raise Rejected(f"unsolvable: argument {short_text(text, 80)} of {call.name} appears neither in "
                               "the query nor in an earlier result")  # fmt: skip


def grounded(ctx: CheckContext, d: Draft) -> None:
    """At least the share `settings.grounding` of the literals the query names appear in the solution's
    arguments or results (else Rejected)."""
    used = "\n".join([*(json.dumps(c.arguments) for t in d.task.solution or [] for c in t), *d.results])
    literals = query_literals("\n".join(d.task.turns))
    missing = [v for v in literals if not answer_found(v, used)]
    if literals and (len(literals) - len(missing)) / len(literals) < ctx.settings.grounding:
        named = ", ".join(short_text(v, 40) for v in missing[:3])
        raise Rejected(f"ungrounded: the query names {named}, which the solution neither uses nor reads "
                       f"({len(literals) - len(missing)} of {len(literals)} literals grounded)")  # fmt: skip


def reference_satisfies_checker(ctx: CheckContext, d: Draft) -> None:
    """The reference solution, played as an agent would, passes the derived checker (else Rejected). Under
    `verify.judge: execution` a reference that fails the checker having done more of the task than an idle
    answer is kept (`executed` False): the paper's "failure with positive reward", retained."""
    with closing(ctx.make_env()) as env:
        evaluation = replay_reference(env, d.task)
    d.executed, d.executed_credit = evaluation.success, evaluation.outcome_credit
    if evaluation.success:
        return
    idle = idle_evaluation(ctx.make_env, d.task).outcome_credit
    if ctx.settings.judge != "execution" or evaluation.outcome_credit <= idle:
        raise Rejected(f"checker: the reference solution does not satisfy the derived checker (progress "
                       f"{evaluation.outcome_credit:.2f}, an idle answer's {idle:.2f})")  # fmt: skip


CHECKS: list[Check] = [
    drop_unasked_answers,
    derive_task,
    not_contaminated,
    replay,
    read_only_asks_a_question,
    read_only_asks_no_action,
    changing_is_asked_for,
    read_only_reads_its_answers,
    checks_nothing_held_out,
    answers_in_results,
    has_effect,
    answers_not_leaked,
    answers_of_the_named_object,
    solvable,
    grounded,
    reference_satisfies_checker,
]
"""The environment checks, in the order they are applied (the first failure is the verification's reason);
`add_check` adds one."""


def add_check(check: Check, reason: VerdictReason, *, before: Check = reference_satisfies_checker) -> Check:
    """Add a verification check and the reason code its `Rejected` messages start with (its contract,
    `coevolve.contracts.verify`): one call, and the check runs before `before` (default: last of the
    environment checks, before the reference is played against the checker)."""
    add_reason(reason)
    if check not in CHECKS:
        CHECKS.insert(CHECKS.index(before), check)
    return check


def remove_check(check: Check, reason: str) -> None:
    """Undo `add_check`."""
    if check in CHECKS:
        CHECKS.remove(check)
    remove_reason(reason)


def check_candidate(
    make_env: Callable[[], Environment],
    row: dict,
    held_out: HeldOut,
    settings: VerifySettings,
) -> Checked:
    """All `CHECKS` of one candidate, in order; Rejected(reason) on the first failure."""
    ctx, draft = CheckContext(make_env, held_out, settings), Draft(row)
    for check in CHECKS:
        check(ctx, draft)
    credit = idle_evaluation(make_env, draft.task).outcome_credit
    return Checked(row, draft.task, draft.after, draft.read, draft.dropped, credit, draft.executed,
                   draft.executed_credit)
