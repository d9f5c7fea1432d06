"""Abstraction: the teacher turns a group of explored calls into candidate tasks (step 5 of the loop).

For every group (one exploration context; optionally each of its calls alone, `single_call_groups`) the
teacher sees the tools and the calls that ran without error, each with its result, and answers with a
JSON array of tasks {intent, query, solution (indices of those calls, or the calls themselves),
answers}. Every reply is kept raw next to its parse result: an unparsable reply, an invalid task (a call
that was never observed, no query, too many calls...) and a near-duplicate (same normalised solution
signature and query token-Jaccard >= the threshold, within the batch or against a known task) are
candidate rows with their status and reason. Ids are content hashes of (env, initial state, query,
solution, answers). The stage `abstract` runs `abstract_groups` over a round's triples.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coevolve.agents.teacher import Teacher
from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import Environment, Task
from coevolve.llm.replies import JsonReplyError, extract_json, short_text
from coevolve.stages.abstract.prompting import abstract_prefix, render_prompt
from coevolve.stages.abstract.questions import question_prefix
from coevolve.stages.abstract.similarity import jaccard, solution_signature, task_signature
from coevolve.stages.explore.exploration import offered_tools, tools_text

MAX_CALLS_SHOWN = 30


MAX_SOLUTION_CALLS = 8


MAX_ANSWERS = 8


MAX_QUERY_CHARS = 1000


_ANSWERS_LIST = re.compile(r'("answers"\s*:\s*)(\[[^\[\]]*\])')


@dataclass(frozen=True)
class Group:
    """The successful calls of one exploration context, and the task whose initial state they ran in."""

    group_id: str
    exploration_id: str
    task: Task
    calls: list[dict]
    """Distinct ok calls in order: {tool, arguments (dict), observation, changed (whether the call changed the
    state where it ran; None when the environment has no state digest)}."""


def build_groups(triples: list[dict], tasks_of_explorations: dict[str, Task]) -> list[Group]:
    """One group per exploration context: its distinct successful calls, in episode order."""
    by_group: dict[str, list[dict]] = {}
    for row in sorted(triples, key=lambda r: (r["group_id"], r["trajectory_id"], r["seq"])):
        by_group.setdefault(row["group_id"], []).append(row)
    groups = []
    for gid, rows in by_group.items():
        seen, calls = set(), []
        for row in rows:
            key = (row["tool"], row["arguments"])
            if row["ok"] and key not in seen and len(calls) < MAX_CALLS_SHOWN:
                seen.add(key)
                calls.append(
                    {
                        "tool": row["tool"],
                        "arguments": json.loads(row["arguments"]),
                        "observation": row["observation"],
                        "changed": row.get("changed"),
                    }
                )
        groups.append(
            Group(gid, rows[0]["exploration_id"], tasks_of_explorations[rows[0]["exploration_id"]], calls)
        )
    return groups


def single_call_groups(groups: list[Group]) -> list[Group]:
    """A one-call group for every call of each group with several (`evolve.abstract_single_calls`): the same
    exploration and initial state, an id naming the group and the call's position (`single_call_group_id`).
    A small teacher given several calls picks solution indices that do not match its query ("Transfer 24.5
    from TRV-8 to EMG-4." over `list_accounts`); given one, the solution is written for it (`abstract_prefix`).
    A call that is the explored task's whole reference solution is left out: it can only give that task
    back (a duplicate)."""
    return [
        Group(single_call_group_id(g.group_id, i), g.exploration_id, g.task, [call])
        for g in groups
        if len(g.calls) > 1
        for i, call in enumerate(g.calls)
        if not _is_reference_solution(call, g.task)
    ]


_SINGLE_CALL = re.compile(r"^(?P<parent>.+):call(?P<index>\d+)$")


def single_call_group_id(parent_group_id: str, call_index: int) -> str:
    """The id of the one-call group of call `call_index` (among the parent group's distinct successful calls,
    `Group.calls`) of `parent_group_id`. The parent is spelled out, not hashed in: only the parent's id is on
    the `triples`, and the candidates table has no column for it, so a task's lineage finds the calls it
    came from through this id (`single_call_origin`)."""
    return f"{parent_group_id}:call{call_index}"


def single_call_origin(group_id: str) -> dict[str, str]:
    """{parent_group_id, call_index} of a one-call group's id (`single_call_group_id`), as text like every
    value of a task's lineage; {} for a group of the triples themselves, whose id is a content hash."""
    match = _SINGLE_CALL.match(group_id)
    return {} if match is None else {"parent_group_id": match["parent"], "call_index": match["index"]}


def _is_reference_solution(call: dict, task: Task) -> bool:
    reference = [c for turn in task.solution or [] for c in turn]
    return solution_signature([ToolCall(name=call["tool"], arguments=call["arguments"])]) == solution_signature(
        reference)


def abstract_messages(group: Group, tools: list[dict], max_tasks: int) -> list[dict]:
    shown = [
        {
            "index": i,
            "tool": c["tool"],
            "arguments": c["arguments"],
            "result": short_text(c["observation"], 400),
        }
        for i, c in enumerate(group.calls)
    ]
    prompt = render_prompt("abstract", tools=tools_text(tools), calls=json.dumps(shown), max_tasks=max_tasks)
    return [{"role": "user", "content": prompt}]


def _solution(items: Any, calls: list[dict]) -> list[dict]:
    """The solution calls an item names (indices or {name, arguments} of observed calls); ValueError if not."""
    if not isinstance(items, list) or not items:
        raise ValueError("'solution' must be a non-empty list of call indices")
    if len(items) > MAX_SOLUTION_CALLS:
        raise ValueError(f"solution has {len(items)} calls (at most {MAX_SOLUTION_CALLS})")
    observed = {solution_signature([{"name": c["tool"], "arguments": c["arguments"]}]): c for c in calls}
    out = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(calls):
            call = calls[item]
        elif isinstance(item, dict) and isinstance(item.get("arguments", {}), dict):
            sig = solution_signature(
                [{"name": str(item.get("name")), "arguments": item.get("arguments", {})}]
            )
            if sig not in observed:
                raise ValueError(f"solution call {short_text(sig, 120)} was not observed")
            call = observed[sig]
        else:
            raise ValueError(
                f"solution item {short_text(item, 60)} is neither an observed call index nor a call"
            )
        out.append({"name": call["tool"], "arguments": call["arguments"]})
    return out


def parse_task(item: Any, calls: list[dict]) -> dict:
    """{intent, query, solution, answers} from one element of the reply; ValueError with a reason."""
    if not isinstance(item, dict):
        raise ValueError(f"a task must be a JSON object, got {type(item).__name__}")
    query = item.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("'query' must be non-empty text")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"query too long ({len(query)} characters)")
    answers = item.get("answers") or []
    if (
        not isinstance(answers, list)
        or len(answers) > MAX_ANSWERS
        or not all(
            isinstance(a, str | int | float) and not isinstance(a, bool) and len(str(a)) <= 200
            for a in answers
        )
    ):
        raise ValueError(f"'answers' must be a list of at most {MAX_ANSWERS} short strings or numbers")
    intent = item.get("intent") if isinstance(item.get("intent"), str) else ""
    return {
        "intent": short_text(intent, 200),
        "query": query.strip(),
        "solution": _solution(item.get("solution"), calls),
        "answers": [str(a) for a in answers],
    }


def repair_answers(reply: str) -> str:
    """`reply` with every "answers" list that is not JSON (`[16:00]`, `[path=/a.txt, content=hi]`: a small
    teacher's) emptied. Verification gives a read-only task without answers the values its solution reads,
    and a state-changing one needs none, so such a task is still worth checking."""

    def empty_if_invalid(match: re.Match) -> str:
        try:
            json.loads(match.group(2))
        except ValueError:
            return match.group(1) + "[]"
        return match.group(0)

    return _ANSWERS_LIST.sub(empty_if_invalid, reply)


def candidate_rows(group: Group, reply: str, *, env: str, teacher: str, max_tasks: int) -> list[dict]:
    """Rows for one teacher reply: one per task it holds (ok / invalid), or one unparsable row. A reply
    whose task array decodes only once its non-JSON "answers" lists are emptied (`repair_answers`) is read
    that way; its `ok` rows say so in `reason`."""
    base = _base_row(group, reply, env=env, teacher=teacher)
    repaired, note = repair_answers(reply), None
    if repaired != reply:
        reply, note = repaired, "an 'answers' list of the reply was not JSON and was read as empty"
    try:
        items = extract_json(reply, list)
    except JsonReplyError as exc:
        items = _single_object(reply)
        if items is None:
            return [{**base, **_bad(group, reply, 0, "unparsable", str(exc))}]
    if not items:
        return [{**base, **_bad(group, reply, 0, "invalid", "the reply holds no tasks")}]
    rows = []
    for i, item in enumerate(items):
        if i >= max_tasks:
            rows.append(
                {**base, **_bad(group, reply, i, "invalid", f"more than {max_tasks} tasks per group")}
            )
            continue
        try:
            task = parse_task(item, group.calls)
        except ValueError as exc:
            rows.append({**base, **_bad(group, reply, i, "invalid", str(exc))})
            continue
        content = {
            "env": env,
            "state": group.task.initial_state,
            "query": task["query"],
            "solution": task["solution"],
            "answers": task["answers"],
        }
        rows.append(
            {
                **base,
                "candidate_id": content_hash(content),
                "status": "ok",
                "reason": note,
                "intent": task["intent"],
                "query": task["query"],
                "solution": json.dumps(task["solution"]),
                "answers": json.dumps(task["answers"]),
                "signature": solution_signature(task["solution"]),
            }
        )
    return rows


def _base_row(group: Group, reply: str, *, env: str, teacher: str) -> dict:
    return {
        "group_id": group.group_id,
        "exploration_id": group.exploration_id,
        "task_id": group.task.id,
        "env": env,
        "teacher": teacher,
        "duplicate_of": None,
        "intent": None,
        "query": None,
        "solution": None,
        "answers": None,
        "signature": None,
        "initial_state": json.dumps(group.task.initial_state),
        "raw_reply": reply,
    }


def _single_object(reply: str) -> list | None:
    """A reply that holds one task object instead of an array of them."""
    try:
        obj = extract_json(reply, dict)
    except JsonReplyError:
        return None
    return [obj] if "query" in obj else None


def _bad(group: Group, reply: str, index: int, status: str, reason: str) -> dict:
    cid = content_hash({"group": group.group_id, "reply": reply, "index": index, "status": status})
    return {"candidate_id": cid, "status": status, "reason": short_text(reason, 500)}


def mark_duplicates(rows: list[dict], existing: list[Task], threshold: float) -> list[dict]:
    """Mark near-duplicates (same signature, similar query) of an earlier ok row or of an existing task."""
    kept: list[tuple[str, str, str]] = [(task_signature(t), " ".join(t.turns), t.id) for t in existing]
    out = []
    for row in rows:
        if row["status"] == "ok":
            twin = next(
                (
                    ident
                    for sig, query, ident in kept
                    if sig == row["signature"] and jaccard(query, row["query"]) >= threshold
                ),
                None,
            )
            if twin is not None:
                cid = content_hash(
                    {"candidate": row["candidate_id"], "group": row["group_id"], "duplicate_of": twin}
                )
                row = {
                    **row,
                    "candidate_id": cid,
                    "status": "duplicate",
                    "duplicate_of": twin,
                    "reason": f"near-duplicate of {twin}",
                }
            else:
                kept.append((row["signature"], row["query"], row["candidate_id"]))
        out.append(row)
    return out


def abstract_groups(
    teacher: Teacher,
    make_env: Callable[[], Environment],
    groups: list[Group],
    *,
    env: str,
    max_tasks: int,
    duplicate_jaccard: float,
    existing: list[Task],
    seed: int,
    samples: int = 1,
    prefill_effect: bool = False,
    prefill_question: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[dict]:
    """Candidate rows of every group (groups without a successful call give one `invalid` row).

    `samples` teacher replies per group (one sampled batch); a reply identical to an earlier one of its
    group adds nothing and is dropped, the others are parsed in order. `prefill_effect`: a one-call
    group's reply is started by its call's effect too (`prompting.abstract_prefix`); `prefill_question`: a
    group with a read-only call that takes arguments is started by its solution and a question naming its
    values (`question_prefix`), before that."""
    asking = [g for g in groups if g.calls]
    messages = [abstract_messages(g, offered_tools(make_env, g.task), max_tasks) for g in asking]
    prefixes = [(prefill_question and question_prefix(g.calls)) or abstract_prefix(g.calls, by_effect=prefill_effect)
                for g in asking for _ in range(samples)]  # fmt: skip
    conversations = [m for m in messages for _ in range(samples)]
    sampling = teacher.settings.text_sampling(seed)
    replies = [""] * len(conversations)
    for prefix in dict.fromkeys(prefixes):  # one batch per reply start
        at = [i for i, p in enumerate(prefixes) if p == prefix]
        for i, reply in zip(at, teacher.complete([conversations[i] for i in at], sampling, reply_prefix=prefix),
                            strict=True):  # fmt: skip
            replies[i] = reply
        if progress:
            progress(len(at))
    if progress and len(asking) < len(groups):
        progress(samples * (len(groups) - len(asking)))
    replies_of = {
        g.group_id: list(dict.fromkeys(replies[i * samples : (i + 1) * samples])) for i, g in enumerate(asking)
    }
    rows = []
    for g in groups:
        if g.group_id in replies_of:
            for reply in replies_of[g.group_id]:
                rows += candidate_rows(g, reply, env=env, teacher=teacher.version, max_tasks=max_tasks)
        else:
            base = _base_row(g, "", env=env, teacher=teacher.version)
            rows.append({**base, **_bad(g, "", 0, "invalid", "no successful call in the group")})
    return mark_duplicates(rows, existing, duplicate_jaccard)
