"""The oracle curriculum: NOT CoEvolve, the ceiling the learning benchmark measures it against.

With `evolve.curriculum: oracle` the evolution keeps its signals and its choice of what to explore, but no
teacher explores or abstracts: for each selected signal, the environment's own generator draws fresh
tasks of the marked task's family (`Environment.fresh_tasks`, a seed stream disjoint from every split),
which then go through verification and merge like any candidate. It is the most a teacher could add
through targeting in a given regime: well-posed tasks of exactly the families the signals point at. A
family whose tasks have several user turns is left out (candidates hold one query).

    explorations = oracle_explorations(targets)                  # rows: what each signal points at
    rows = oracle_candidates(env, explorations, per_target=2, stream="run:round")

With `evolve.curriculum: oracle-gap` (the coverage experiment's ceiling, not CoEvolve either) the signals
only say how many explorations there are; each names one family of the coverage gap instead, in turn
across the run's evolutions (`gap_explorations`), so that every gap family is drawn once before any twice.
"""

from __future__ import annotations

import json

from coevolve.core import content_hash
from coevolve.envs.base import Environment, FreshTasks, Task
from coevolve.stages.abstract.similarity import solution_signature
from coevolve.stages.explore.exploration import Exploration, Target

TEACHER = "oracle-curriculum"


def oracle_explorations(targets: list[Target]) -> list[Exploration]:
    """One exploration per target, without a teacher: its context names the family to draw tasks of."""
    return [Exploration(t, context={"curriculum": TEACHER, "families": [t.task.family]}, status="oracle",
                        reason="no teacher: the oracle curriculum draws fresh tasks of the family")
            for t in targets]  # fmt: skip


def gap_explorations(targets: list[Target], gap_families: list[str], first_slot: int) -> list[Exploration]:
    """One exploration per target, without a teacher, naming one gap family each: slots `first_slot`,
    `first_slot + 1`, ... of the gap families taken in turn."""
    return [Exploration(t, context={"curriculum": TEACHER, "families": [gap_families[(first_slot + i) % len(gap_families)]]},
                        status="oracle", reason="no teacher: the oracle curriculum draws fresh tasks of a gap family")
            for i, t in enumerate(targets)]  # fmt: skip


def oracle_candidates(env: Environment, explorations: list[dict], *, per_target: int, stream: str) -> list[dict]:
    """`candidates` rows: `per_target` fresh one-turn tasks of each oracle exploration's family."""
    if not env.offers(FreshTasks):
        raise ValueError(f"environment {env.name!r} cannot generate fresh tasks of a family (it does not offer "
                         "the FreshTasks role): the oracle curriculum needs it")
    rows = []
    for x in explorations:
        if x["status"] != "oracle":
            continue
        families = json.loads(x["context"])["families"]
        for task in env.fresh_tasks(families, per_target, f"{stream}:{x['exploration_id']}"):
            if len(task.turns) == 1:
                rows.append(candidate_row(task, x["exploration_id"], env.name))
    return rows


def candidate_row(task: Task, exploration_id: str, env: str) -> dict:
    """A generator task as an `ok` candidate (its reference calls as the solution, its answers)."""
    solution = [call.model_dump() for turn in task.solution or [] for call in turn]
    answers = [str(a) for turn in task.checker.get("answers") or [] for a in turn]
    content = {"env": env, "state": task.initial_state, "query": task.turns[0], "solution": solution,
               "answers": answers}  # fmt: skip
    return {
        "candidate_id": content_hash(content), "group_id": content_hash([exploration_id, "oracle"]),
        "exploration_id": exploration_id, "task_id": task.id, "env": env, "teacher": TEACHER, "status": "ok",
        "reason": None, "duplicate_of": None, "intent": task.family, "query": task.turns[0],
        "solution": json.dumps(solution), "answers": json.dumps(answers), "signature": solution_signature(solution),
        "initial_state": json.dumps(task.initial_state), "raw_reply": "",
    }
