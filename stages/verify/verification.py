"""Verification (step 6 of the loop): environment checks, then the policy's attempts, then a verdict.

Each `ok` candidate is checked in the environment (`stages.verify.checks`); one the checks discard hands over
to its siblings, the `duplicate` rows of the same solution (`sibling_duplicates`), checked in order until
one passes: it stands for the solution. The policy then attempts the survivors (`attempts` each, greedy
when 1). The paper's rule (success -> `accept`, failure with positive reward -> `retain`, failure with zero
reward -> `discard`) is applied to one of two executions (`verify.judge`):

- `execution` (default): the task itself, executed in the environment: its reference solution played
  against its checker by the last check. Satisfied -> `accept`; did part of the task -> `retain`; a
  reference that does nothing, or any failed check -> `discard`. The policy's attempts are recorded and
  weight the task (`merge.unsolved_weighting`) but decide nothing.
- `policy` (labelled, an ablation): the policy's attempts. Solved -> `accept`; a failure that did part of
  the task -> `retain`; else `discard`: a task the policy cannot do yet never enters the data.

"Part of the task" is `Evaluation.outcome_credit` (the reward where it is all outcome, as in BFCL and
AppWorld; the share of checks passed in the tool world, whose reward also pays shaping credit for calls)
above an idle answer's (`candidates.idle_evaluation`).

Without verification (the paper's ablation) every `ok` candidate is accepted with a lenient checker
(failing solution calls skipped, unseen answers dropped), with no checks and no attempts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

from coevolve.agents.episodes import run_episodes
from coevolve.agents.ledger import step_rows, trajectory_rows
from coevolve.core import content_hash
from coevolve.envs.base import Environment, Task
from coevolve.llm.replies import short_text
from coevolve.stages.abstract.abstraction import single_call_origin
from coevolve.stages.verify.candidates import Rejected, candidate_task, replay_solution
from coevolve.stages.verify.checks import CONTAMINATION, Checked, check_candidate
from coevolve.stages.verify.contamination import HeldOut
from coevolve.stages.verify.settings import VerifySettings

__all__ = ["VerifySettings", "check_solutions", "exploration_lineage", "sibling_duplicates", "verify_candidates"]


def verify_candidates(
    policy: Any,
    make_env: Callable[[], Environment],
    candidates: list[dict],
    held_out: list[Task],
    lineage: dict[str, dict],
    settings: VerifySettings,
    *,
    run: str,
    round_: int,
    progress: Callable[[int], None] | None = None,
) -> dict[str, list[dict]]:
    """`verifications` for the ok candidates, plus the policy's attempts as `trajectories`/`steps`.

    `policy` has `engine`, `chat` and `version`; `lineage` maps exploration ids to {signal_id, ...}.
    `progress(n)` counts 1 + `settings.attempts` per ok candidate (its checks, then its attempts).
    """
    advance = progress or (lambda n: None)
    guard = HeldOut.of(held_out, make_env)
    if not settings.verify:
        rows = _unverified(make_env, policy.version, candidates, lineage, guard, settings.contamination_jaccard)
        return {"verifications": rows, "trajectories": [], "steps": []}
    checked, rows = [], []
    for passed, rejected in check_solutions(make_env, candidates, guard, settings):
        rows += [_row(wording, policy.version, "discard", reason) for wording, reason in rejected]
        checked += [passed] if passed is not None else []
        advance(1 if passed is not None else 1 + settings.attempts)
    jobs = [(c.task, k) for c in checked for k in range(settings.attempts)]
    episodes = run_episodes(policy.engine, policy.chat, make_env, jobs, settings.sampling(), settings.limits,
                            seed=settings.seed, progress=advance)
    trajectories = trajectory_rows(episodes, run=run, round_=round_, source="verify", policy=policy.version)
    for i, c in enumerate(checked):
        span = slice(i * settings.attempts, (i + 1) * settings.attempts)
        credit = max(ep.evaluation.outcome_credit for ep in episodes[span])
        judge = _executed if settings.judge == "execution" else _judged
        rows.append(judge(c, trajectories[span], credit, policy.version, lineage.get(c.row["exploration_id"], {})))
    return {"verifications": rows, "trajectories": trajectories, "steps": step_rows(episodes, trajectories)}


def check_solutions(
    make_env: Callable[[], Environment],
    candidates: list[dict],
    held_out: HeldOut,
    settings: VerifySettings,
) -> Iterator[tuple[Checked | None, list[tuple[dict, str]]]]:
    """Per `ok` candidate: the first of its wordings (itself, then its `sibling_duplicates`) that passes
    the environment checks (None when none does), and the wordings discarded on the way with their reasons."""
    siblings = sibling_duplicates(candidates)
    for row in (r for r in candidates if r["status"] == "ok"):
        passed, rejected = None, []
        for wording in (row, *siblings.get(row["candidate_id"], [])):
            try:
                passed = check_candidate(make_env, wording, held_out, settings)
                break
            except Rejected as exc:
                rejected.append((wording, str(exc)))
            except Exception as exc:  # an environment that breaks on a candidate: a row, not a crash
                rejected.append((wording, f"error: {short_text(str(exc), 300)}"))
        yield passed, rejected


def sibling_duplicates(candidates: list[dict]) -> dict[str, list[dict]]:
    """The `duplicate` rows of each `ok` candidate (the same solution from another reply or group), in
    order. When the environment checks discard a candidate, its next sibling is checked in its place: the
    first wording of a solution may be a mismatched one (an instruction over a read-only call) where a later
    reply, or the call's own one-call group, words it well; a duplicate is only a duplicate of a task that
    is kept. Duplicates of a dataset task are not siblings."""
    ok = {r["candidate_id"] for r in candidates if r["status"] == "ok"}
    out: dict[str, dict[str, dict]] = {}
    for row in candidates:  # one row per id: two replies of a group can hold the very same task
        if row["status"] == "duplicate" and row.get("duplicate_of") in ok:
            out.setdefault(row["duplicate_of"], {}).setdefault(row["candidate_id"], row)
    return {twin: list(rows.values()) for twin, rows in out.items()}


def _row(candidate: dict, policy: str, outcome: str, reason: str) -> dict:
    return {
        "verification_id": content_hash([candidate["candidate_id"], policy, "verify"]),
        "candidate_id": candidate["candidate_id"],
        "outcome": outcome,
        "reason": reason,
        "reward": None,
        "success": None,
        "attempts": 0,
        "policy_version": policy,
        "checker": None,
        "expected_digest": None,
        "task_id": None,
        "task": None,
    }


def _unverified(
    make_env: Callable[[], Environment], policy: str, candidates: list[dict], lineage: dict[str, dict],
    held_out: HeldOut, threshold: float,
) -> list[dict]:
    """The no-verification ablation: every ok candidate accepted as it is, with a lenient checker, unless
    it is a held-out task in other words (the contamination guard applies on every admission path)."""
    rows = []
    with closing(make_env()) as env:
        for row in (r for r in candidates if r["status"] == "ok"):
            try:
                task = candidate_task(env, row, strict=False)
            except Exception as exc:  # the solution does not even parse into a task
                rows.append(_row(row, policy, "discard", f"error: {short_text(str(exc), 300)}"))
                continue
            twin = held_out.twin(task, threshold, **_final_state(make_env, task))
            if twin is not None:
                rows.append(_row(row, policy, "discard", f"{CONTAMINATION}: {twin}"))
                continue
            lineage_of = lineage.get(row["exploration_id"], {})
            rows.append(_decided(Checked(row, task, None), policy, lineage_of, "accept", UNVERIFIED))
    return rows


UNVERIFIED = "admitted without verification (verify.enabled: false)"


def _final_state(make_env: Callable[[], Environment], task: Task) -> dict:
    """The final-state digest of an unverified task's solution, for the guard (none when it fails)."""
    try:
        before, after, _ = replay_solution(make_env, task)
    except Exception:  # unverified: a solution that does not replay is admitted all the same
        return {}
    return {"after": after, "read_only": before is not None and before == after}


def _executed(c: Checked, attempts: list[dict], credit: float, policy: str, lineage: dict) -> dict:
    """The paper's rule on the task's execution (`verify.judge: execution`): the reference solution satisfied
    the checker -> accept, else (it did part of the task: the checks let nothing less through) retain; the
    policy's `attempts` are reported in the reason and recorded, deciding nothing."""
    reward, success = max(t["reward"] for t in attempts), any(t["success"] for t in attempts)
    solved, n = sum(t["success"] for t in attempts), len(attempts)
    if c.executed:
        outcome, reason = "accept", "executed: the reference solution satisfies the checker"
    else:
        outcome = "retain"
        reason = (f"executed: the reference solution fails the checker having done part of the task "
                  f"(progress {c.executed_credit:.2f} above an idle answer's {c.idle_credit:.2f})")  # fmt: skip
    reason += f"; the policy solved {solved}/{n} attempts (best progress {credit:.2f})"
    reason += _answer_notes(c)
    return _decided(c, policy, lineage, outcome, reason, reward=reward, success=success, attempts=n)


def _answer_notes(c: Checked) -> str:
    notes = ""
    if c.read_answers:
        notes += f"; answers read from the solution's last result: {', '.join(c.read_answers)}"
    if c.dropped_answers:
        notes += f"; the query asks for no answer, so the teacher's were dropped: {', '.join(c.dropped_answers)}"
    return notes


def _judged(c: Checked, attempts: list[dict], credit: float, policy: str, lineage: dict) -> dict:
    """The paper's rule on the policy's `attempts` (`verify.judge: policy`); `credit`: the most of the task
    one of them did."""
    reward, success = max(t["reward"] for t in attempts), any(t["success"] for t in attempts)
    n = len(attempts)
    if success:
        outcome, reason = (
            "accept",
            f"the policy solved it ({sum(t['success'] for t in attempts)}/{n} attempts)",
        )
    elif credit > c.idle_credit:
        outcome = "retain"
        reason = (f"the policy failed having done part of the task: progress {credit:.2f} above an idle "
                  f"answer's {c.idle_credit:.2f} (best of {n}; reward {reward:.2f})")  # fmt: skip
    elif reward == 0:
        outcome, reason = "discard", f"the policy failed with zero reward ({n} attempts)"
    else:
        outcome = "discard"
        reason = (f"the policy failed doing no more of the task than an idle answer: progress {credit:.2f}, "
                  f"idle {c.idle_credit:.2f} (best of {n}; reward {reward:.2f})")  # fmt: skip
    reason += _answer_notes(c)
    return _decided(c, policy, lineage, outcome, reason, reward=reward, success=success, attempts=n)


def _decided(
    c: Checked,
    policy: str,
    lineage: dict,
    outcome: str,
    reason: str,
    *,
    reward: float | None = None,
    success: bool | None = None,
    attempts: int = 0,
) -> dict:
    base = _row(c.row, policy, outcome, reason)
    task = c.task
    if outcome != "discard":
        ids = {
            **lineage,
            "exploration_id": c.row["exploration_id"],
            "group_id": c.row["group_id"],
            **single_call_origin(c.row["group_id"]),  # a one-call group's triples carry its parent's id
            "candidate_id": c.row["candidate_id"],
            "verification_id": base["verification_id"],
        }
        task = task.model_copy(update={"lineage": {k: v for k, v in ids.items() if v is not None}})
    return {
        **base,
        "reward": reward,
        "success": success,
        "attempts": attempts,
        "checker": json.dumps(task.checker),
        "expected_digest": c.expected_digest,
        "task_id": task.id if outcome != "discard" else None,
        "task": json.dumps(task.to_row()) if outcome != "discard" else None,
    }


def exploration_lineage(explorations: list[dict]) -> dict[str, dict]:
    return {
        x["exploration_id"]: {
            "signal_id": x["signal_id"],
            "trajectory_id": x["trajectory_id"],
            "signal_kind": x["kind"],
        }
        for x in explorations
    }
