"""verify: environment verification of candidate tasks (step 6 of the loop).

Each `ok` candidate becomes a task (one user turn = its query) and is checked in order, the first
failure deciding a `discard` with its reason:

1. checker: the verifiable checker spec is derived by replaying the solution from the initial state
   (tool world: `build_checker` -> expected final state + required answers; BFCL: the solution itself
   is the ground truth, no `ground_truth` key). The replay must run without errors.
2. contamination: a near-duplicate of a held-out evaluation task (same normalised solution signature,
   or query token-Jaccard >= `evolve.contamination_jaccard`) is discarded with reason `contamination`.
3. replay: the solution runs call by call in a fresh environment; it must change the state (digests
   differ) or read what the task asks for (every answer appears in a result of the solution). A
   read-only candidate must ask a question or for information (`asks_for_information`: "What is ...?",
   "Show me ...", "... Tell me the result.", not "Transfer ..." solved by reading a balance; all 53
   read-only one-turn reference tasks of the tool world ask), and no clause of it may ask for an action
   (`requested_action`: "Buy 9 x P-435 and tell me the order total." solved by reading the product is
   a mismatched pair; no read-only reference task of the tool world asks for one). One whose teacher
   named no answer asks for what its last call reads: its answers become the values of that result the
   query does not already name (at most `MAX_READ_ANSWERS`; recorded in the verdict's reason), else it
   is discarded as `no effect`.
   A state-changing candidate whose query asks for no information ("Transfer 125.39 from TRV-4 to
   BIZ-3.") is checked without the answers its teacher named (a small teacher adds the balance a
   transfer returned, or a number no result shows; the policy could only pass by stating what nobody
   asked for); they are dropped before the checker is derived, and the verdict's reason names them.
   Where the query names one object of the last result ("What is the balance of CHK-8?" over a list of
   accounts), an answer that is only another object's value is a `misread` (a small teacher copied the
   first balance it saw; the policy, answering what was asked, could only fail: it was "retained").
4. solvability: every literal argument of the solution appears in the query or in a result of an
   earlier call of the solution.
5. grounding: at least the share `evolve.grounding` of the literals the query names (numbers and
   identifiers with a digit, paths, quoted text) appear in the solution's arguments or results. This
   discards a small teacher's mismatched pairs, e.g. "Transfer 125.39 from TRV-4 to BIZ-3." solved by
   `get_balance(TRV-4)` (1 of 3 grounded). Measured on reference tasks: every one of the tool world's
   296 grounds all its literals; BFCL's human-written queries name context their solution never
   touches ("a 30-gallon tank"), 78 of 181 fall short of 100 % and 10 of 181 of the default 50 %.
6. the reference solution, replayed as an oracle agent, satisfies the checker.

A candidate discarded by these checks hands over to its siblings, the `duplicate` rows of the same
solution (`sibling_duplicates`), checked in order until one passes: it stands for the solution.

Then the current policy (after round r-1; after round r with `evolve.verify_after_update`) attempts
the survivors (`evolve.verify_attempts`, greedy when 1): success -> `accept`, a failure with positive
reward -> `retain`, else `discard` (the paper's rule).
"Positive reward" means part of the task done: the attempt's `Evaluation.outcome_credit` (the reward where
it is all outcome, as in BFCL and AppWorld; the share of checks passed in the tool world, whose reward also
pays 0.05 for a call that ran and 0.04 for parsing) beats an idle answer's (`idle_evaluation`: every turn
answered without a tool call, which scores 0 in BFCL and AppWorld, and passes a read-only tool-world task's
state check). Weighing the tool world's reward instead retained, on shaping credit alone, every failed
read-only task, and those were the ill-posed ones (benchmarks/RESULTS.md).

`evolve.verify: false` is the paper's no-verification ablation: every `ok` candidate is accepted with a
lenient checker (failing solution calls skipped, unseen answers dropped), with no checks and no attempts. Writes
`verifications` (with the checker spec and the admitted task row) and the attempts as `trajectories`/
`steps` with source `verify`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.agents.ledger import step_rows, trajectory_rows
from coevolve.agents.teacher import short_text
from coevolve.envs.base import Environment, Evaluation, Task
from coevolve.envs.replay import replay_reference
from coevolve.envs.toolworld.checker import answer_found
from coevolve.llm.engine import SamplingParams
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageDef, StageResult
from coevolve.stages.abstract import jaccard, solution_signature, task_signature
from coevolve.storage.datasets import task_row

from coevolve.core import ToolCall, content_hash, round_seed

CONTAMINATION = "contamination"
IDLE_REPLY = "Sorry, I cannot help with that."
MAX_READ_ANSWERS = 3
"""Most values of a read-only solution's last result taken as the answers of a task that names none."""
MAX_ANSWER_CHARS = 200
_CLAUSE_START = r"(?:^|[.;:!?]\s+|,?\s+(?:and|then)\s+)\s*(?:please\s+|(?:can|could) you\s+)?"
"""Where a sentence or clause of a query starts, with an optional "please" / "could you"."""
_INFORMATION_REQUEST = re.compile(
    _CLAUSE_START + r"(what|which|how|who|whose|when|where|why|is|are|was|were|does|do|did|can|could|tell|show"
    r"|list|find|check|look|get|read|give|fetch|display|retrieve|search)\b",
    re.IGNORECASE,
)
"""A sentence or clause of a query that asks for information ("Tell me ...", "... and show me ...")."""
_ACTION_REQUEST = re.compile(
    _CLAUSE_START + r"(add|append|book|buy|cancel|copy|create|delete|deposit|forward|make|message|move|order|pay"
    r"|post|purchase|put|remove|rename|reply|reschedule|save|schedule|send|set|share|text|transfer|update"
    r"|upload|withdraw|write)\b",
    re.IGNORECASE,
)
"""A sentence or clause of a query that asks for an action ("Buy ...", "... and send ...")."""
_QUERY_LITERAL = re.compile(
    r"(?<![\w'])'([^'\n]{1,80})'(?![\w'])"  # 'quoted text' (not an apostrophe)
    r'|"([^"\n]{1,80})"'  # "quoted text"
    r"|((?<![\w.])/[\w./-]*\w)"  # /a/path
    r"|([\w.-]*\d[\w.-]*)"  # a number or an identifier with a digit: 125.39, TRV-4, 2026-12-01
)
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


@dataclass(frozen=True)
class VerifySettings:
    attempts: int = 1
    greedy: bool = True
    temperature: float = 1.0
    max_new_tokens: int = 96
    limits: EpisodeLimits = EpisodeLimits()
    contamination_jaccard: float = 0.9
    seed: int = 0
    verify: bool = True
    grounding: float = 0.5

    def sampling(self) -> SamplingParams:
        greedy = self.greedy and self.attempts == 1
        return SamplingParams(
            temperature=self.temperature, max_new_tokens=self.max_new_tokens, greedy=greedy, seed=self.seed
        )


# --- building the task --------------------------------------------------------------------------


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


# --- environment checks -------------------------------------------------------------------------


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


def asks_for_information(query: str) -> bool:
    """Whether a query asks a question or for information ("What is ...?", "Show me ...", "Read ..."),
    rather than for an action ("Transfer ...", "Copy ...")."""
    return query.rstrip().endswith("?") or _INFORMATION_REQUEST.search(query) is not None


def requested_action(query: str) -> str | None:
    """The verb of the first sentence or clause of a query that asks for an action ("Buy 9 x P-435 and tell
    me the total." -> "Buy"), if any."""
    match = _ACTION_REQUEST.search(query)
    return match.group(1) if match else None


def query_literals(query: str) -> list[str]:
    """Numbers, identifiers with a digit, paths and quoted text the query names, in order."""
    found = (next(g for g in m.groups() if g is not None) for m in _QUERY_LITERAL.finditer(query))
    return list(dict.fromkeys(v.strip().rstrip(".-") for v in found if v.strip().rstrip(".-")))


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


# --- the verification ---------------------------------------------------------------------------


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
) -> dict[str, list[dict]]:
    """`verifications` for the ok candidates, plus the policy's attempts as `trajectories`/`steps`.

    `policy` has `engine`, `chat` and `version`; `lineage` maps exploration ids to {signal_id, ...}.
    """
    if not settings.verify:
        return {"verifications": _unverified(policy.version, candidates, lineage), "trajectories": [], "steps": []}
    pool = [(task_signature(t), " ".join(t.turns), t.id) for t in held_out]
    checked, rows = [], []
    for passed, rejected in check_solutions(make_env, candidates, pool, settings):
        rows += [_row(wording, policy.version, "discard", reason) for wording, reason in rejected]
        checked += [passed] if passed is not None else []
    jobs = [(c.task, k) for c in checked for k in range(settings.attempts)]
    episodes = run_episodes(
        policy.engine, policy.chat, make_env, jobs, settings.sampling(), settings.limits, seed=settings.seed
    )
    trajectories = trajectory_rows(episodes, run=run, round_=round_, source="verify", policy=policy.version)
    for i, c in enumerate(checked):
        span = slice(i * settings.attempts, (i + 1) * settings.attempts)
        credit = max(ep.evaluation.outcome_credit for ep in episodes[span])
        rows.append(_judged(c, trajectories[span], credit, policy.version, lineage.get(c.row["exploration_id"], {})))
    return {"verifications": rows, "trajectories": trajectories, "steps": step_rows(episodes, trajectories)}


def check_solutions(
    make_env: Callable[[], Environment],
    candidates: list[dict],
    held_out: list[tuple[str, str, str]],
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


def _unverified(policy: str, candidates: list[dict], lineage: dict[str, dict]) -> list[dict]:
    """The no-verification ablation: every ok candidate accepted as it is, with a lenient checker."""
    rows = []
    for row in (r for r in candidates if r["status"] == "ok"):
        try:
            task = candidate_task(row, strict=False)
        except Exception as exc:  # the solution does not even parse into a task
            rows.append(_row(row, policy, "discard", f"error: {short_text(str(exc), 300)}"))
            continue
        lineage_of = lineage.get(row["exploration_id"], {})
        rows.append(_decided(Checked(row, task, None), policy, lineage_of, "accept", UNVERIFIED))
    return rows


UNVERIFIED = "admitted without verification (evolve.verify: false)"


def _judged(c: Checked, attempts: list[dict], credit: float, policy: str, lineage: dict) -> dict:
    """The paper's rule on the policy's `attempts`; `credit`: the most of the task one of them did."""
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
    if c.read_answers:
        reason += f"; answers read from the solution's last result: {', '.join(c.read_answers)}"
    if c.dropped_answers:
        reason += f"; the query asks for no answer, so the teacher's were dropped: {', '.join(c.dropped_answers)}"
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
        "task": json.dumps(task_row(task)) if outcome != "discard" else None,
    }


# --- the stage ----------------------------------------------------------------------------------


def held_out_tasks(ctx: RunContext) -> list[Task]:
    return [t for split in ctx.config.eval.splits for t in ctx.env_tasks(split)]


def settings_of(ctx: RunContext, round_: int, purpose: str = "verify") -> VerifySettings:
    cfg, rollout = ctx.config.evolve, ctx.config.rollout
    return VerifySettings(
        cfg.verify_attempts,
        cfg.verify_greedy,
        rollout.temperature,
        rollout.max_new_tokens,
        EpisodeLimits(rollout.max_replies, rollout.max_context_tokens),
        cfg.contamination_jaccard,
        round_seed(ctx.config.run.seed, round_, purpose),
        cfg.verify,
        cfg.grounding,
    )


def exploration_lineage(explorations: list[dict]) -> dict[str, dict]:
    return {
        x["exploration_id"]: {
            "signal_id": x["signal_id"],
            "trajectory_id": x["trajectory_id"],
            "signal_kind": x["kind"],
        }
        for x in explorations
    }


def _inputs(ctx: RunContext, round_: int) -> dict[str, str]:
    return {
        "candidates": ctx.store.completed(round_, "abstract").content_hash(),
        "policy": ctx.policy_after(ctx.evolution_policy_round(round_))[0],
    }


def compute_verify(ctx: RunContext, round_: int, key: str) -> StageResult:
    candidates = ctx.store.read(round_, "abstract", "candidates").to_pylist()
    lineage = exploration_lineage(ctx.store.read(round_, "explore", "explorations").to_pylist())
    policy = ctx.use_policy(ctx.evolution_policy_round(round_))
    artifacts = verify_candidates(
        policy,
        ctx.make_env,
        candidates,
        held_out_tasks(ctx),
        lineage,
        settings_of(ctx, round_),
        run=ctx.run,
        round_=round_,
    )
    outcomes = [r["outcome"] for r in artifacts["verifications"]]
    return StageResult(artifacts, {o: outcomes.count(o) for o in ("accept", "retain", "discard")})


VERIFY = StageDef("verify", 10, ("evolve", "env", "rollout", "eval", "run"), _inputs, compute_verify)
