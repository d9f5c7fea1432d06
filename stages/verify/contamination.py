"""The contamination guard: no synthesized task may be a held-out task in other words.

A candidate is refused when it matches a task of the evaluation splits on what the task is or on what it
checks:

- its solution (the same calls, `similarity.task_signature`) or its query (word Jaccard at or above
  `verify.contamination_jaccard`);
- the answers it requires, in the same world (initial state): "What is the balance of CHK-8?" asked
  another way still checks the held-out answer;
- the final state its solution leaves, where the solution changes the state and the environment keeps
  state digests: another wording of a held-out transfer ends in the held-out state.

Every admission path applies it: verification (`checks.not_contaminated`, `checks.no_held_out_outcome`)
and the no-verification ablation (`verification._unverified`), the oracle curriculum's fresh tasks
included, since they pass through verification.

    held_out = HeldOut.of(tasks, make_env)          # replays each held-out solution once
    twin = held_out.twin(task, threshold=0.9, after=digest)   # "held-out task 3f2a: the same answers ..."
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from coevolve.core import content_hash
from coevolve.envs.base import Environment, Task
from coevolve.stages.abstract.similarity import jaccard, task_signature
from coevolve.stages.verify.candidates import Rejected, replay_solution


def world_of(task: Task) -> str:
    return content_hash(task.initial_state, length=16)


def required_answers(task: Task) -> frozenset[str]:
    """The answers the task's checker requires, all turns together, compared case-insensitively."""
    return frozenset(str(a).strip().lower() for turn in task.checker.get("answers") or [] for a in turn)


@dataclass(frozen=True)
class HeldOut:
    """What the held-out tasks are and what they check, indexed for the guard."""

    signatures: dict[str, str] = field(default_factory=dict)
    """Solution signature -> held-out task id."""
    queries: tuple[tuple[str, str], ...] = ()
    """(query, held-out task id)."""
    answers: dict[tuple[str, frozenset[str]], str] = field(default_factory=dict)
    """(world, required answers) -> held-out task id, for tasks that require answers."""
    outcomes: dict[str, str] = field(default_factory=dict)
    """Final-state digest of a held-out solution that changes the state -> held-out task id."""

    @classmethod
    def of(cls, tasks: list[Task], make_env: Callable[[], Environment] | None = None) -> HeldOut:
        """The index of `tasks`; with `make_env`, each reference solution is replayed once for the final
        state it leaves (skipped where the environment keeps no state digest)."""
        signatures = {task_signature(t): t.id for t in reversed(tasks) if t.solution}
        answers = {(world_of(t), required_answers(t)): t.id for t in reversed(tasks) if required_answers(t)}
        queries = tuple((" ".join(t.turns), t.id) for t in tasks)
        return cls(signatures, queries, answers, _outcomes(tasks, make_env) if make_env else {})

    def twin(self, task: Task, threshold: float, *, after: str | None = None, read_only: bool = False) -> str | None:
        """Why `task` is a held-out task in other words ("held-out task <id>: ..."), else None. `after`:
        the final-state digest of its solution (`read_only`: the solution changed nothing)."""
        return self.near_duplicate(task, threshold) or self.same_check(task, after=after, read_only=read_only)

    def near_duplicate(self, task: Task, threshold: float) -> str | None:
        if task.solution and (ident := self.signatures.get(task_signature(task))):
            return f"near-duplicate of held-out task {ident}"
        query = " ".join(task.turns)
        for other, ident in self.queries:
            if jaccard(query, other) >= threshold:
                return f"near-duplicate of held-out task {ident}"
        return None

    def same_check(self, task: Task, *, after: str | None = None, read_only: bool = False) -> str | None:
        answers = required_answers(task)
        if answers and (ident := self.answers.get((world_of(task), answers))):
            return f"checks what held-out task {ident} checks (the same answers in the same world)"
        if after is not None and not read_only and (ident := self.outcomes.get(after)):
            return f"checks what held-out task {ident} checks (its solution ends in the same state)"
        return None


def _outcomes(tasks: list[Task], make_env: Callable[[], Environment]) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    for task in tasks:
        if not task.solution:
            continue
        try:
            before, after, _ = replay_solution(make_env, task)
        except Rejected:  # a held-out reference that does not replay here: its text and answers still count
            continue
        if before is None:  # the environment keeps no state digests: none of its tasks will have one
            return {}
        if after != before:
            outcomes.setdefault(after, task.id)
    return outcomes
