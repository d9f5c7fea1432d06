"""The explore-yield benchmark's rows and figures: one row per exploration, each link's yield from them.

A row says what one exploration did with the gap tool it was aimed at (`targets.Aim`): the signal's kind
and the tool it names (none for the control), the tools its context held, the tools its episodes called
successfully, and every candidate its calls were abstracted into with its verdict and reason, and the
admitted task ids. The links, each a proportion with its Wilson interval:

- (a) `call`: explorations that made a successful call of their gap tool, of all explorations aimed at it
  (the row keeps the errors of its failed calls of it, its replies, its malformed calls and each episode's
  first reply);
- (b) `pass`: `ok` candidates calling their exploration's gap tool that verification admits (`merge.admit`);
- (c) `admit`: admitted tasks calling a gap family's tool, per family per round (counts), and explorations
  whose admitted tasks include one of their own family (a proportion).

`THRESHOLD` is the bar the benchmark was written down with before it ran.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

THRESHOLD = ("(a) the share of explorations that call their named gap tool successfully >= 0.5 (the point "
             "estimate), and (c) at least one admitted task calling each gap family's tool in every round")  # fmt: skip
MIN_CALL_YIELD = 0.5
MIN_ADMITTED_PER_FAMILY = 1
Z95 = 1.959963984540054
MAX_ERROR_CHARS = 200
"""A failed call's error, or an episode's first reply, as a row keeps it."""


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion (95 % by default); None without trials."""
    if trials <= 0:
        return None
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials = {trials}], got {successes}")
    p, n = successes / trials, trials
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends, not 1 - 1e-16
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def solution_tools(solution: str | None) -> list[str]:
    """Tool names of a candidate's solution (a JSON list of {name, arguments}), in order."""
    try:
        calls = json.loads(solution or "[]")
    except ValueError:
        return []
    return [c["name"] for c in calls if isinstance(c, dict) and isinstance(c.get("name"), str)]


def candidate_verdicts(candidates: list[dict], verifications: list[dict], siblings: dict[str, list[dict]]
                       ) -> dict[str, tuple[str, str, str | None]]:  # fmt: skip
    """{ok candidate id: (outcome, reason, admitted task id or None)}: the verdict of the wording that
    passed the environment checks (the candidate or one of its `siblings`), else `discard` with the
    reasons of every wording discarded."""
    by_id: dict[str, list[dict]] = {}
    for row in verifications:
        by_id.setdefault(row["candidate_id"], []).append(row)
    out = {}
    for candidate in (c for c in candidates if c["status"] == "ok"):
        wordings = [
            candidate["candidate_id"],
            *(s["candidate_id"] for s in siblings.get(candidate["candidate_id"], [])),
        ]
        rows = [row for cid in wordings for row in by_id.get(cid, [])]
        decided = [row for row in rows if row.get("checker") is not None]
        if decided:
            row = decided[-1]
            out[candidate["candidate_id"]] = (row["outcome"], row["reason"] or "", row["task_id"])
        else:
            reasons = "; ".join(row["reason"] or "" for row in rows) or "not verified"
            out[candidate["candidate_id"]] = ("discard", reasons, None)
    return out


def exploration_row(aim, *, round_: int, named: bool, exploration: dict, steps: Iterable[dict],
                    candidates: Sequence[dict], verdicts: dict, admit: Sequence[str]) -> dict:  # fmt: skip
    """One exploration's row (`aim`: its `targets.Aim`; `exploration`: its `explorations` row; `steps`: its
    episodes' steps; `candidates`: the candidate rows abstracted from its calls)."""
    context = json.loads(exploration["context"]) if exploration["context"] else {}
    steps = list(steps)
    called = sorted({s["tool"] for s in steps if s["kind"] == "call" and s["ok"]})
    failed = [s["observation"][:MAX_ERROR_CHARS] for s in steps if s["kind"] == "call" and s["tool"] == aim.tool
              and not s["ok"]]  # fmt: skip
    rows = []
    for c in candidates:
        outcome, reason, task_id = verdicts.get(c["candidate_id"], (None, c.get("reason") or "", None))
        tools = solution_tools(c.get("solution"))
        rows.append({"candidate_id": c["candidate_id"], "status": c["status"], "query": c.get("query"),
                     "tools": tools, "calls_gap_tool": aim.tool in tools, "verdict": outcome,
                     "reason": reason, "task_id": task_id if outcome in admit else None})  # fmt: skip
    return {
        "round": round_, "exploration_id": exploration["exploration_id"], "world_task_id": aim.target.task.id,
        "signal_kind": aim.target.kind, "named_tool": aim.tool if named else None, "gap_tool": aim.tool,
        "gap_family": aim.family, "listing": aim.listing, "status": exploration["status"],
        "reason": exploration["reason"],
        "tools_in_context": sorted({*context.get("tools", []), *context.get("named_tools", []),
                                    *([context["listing"]] if context.get("listing") else [])}),
        "tools_called_ok": called, "called_gap_tool": aim.tool in called, "gap_tool_errors": failed,
        "replies": sum(s["call_index"] == 0 for s in steps),
        "first_replies": [s["reply"][:MAX_ERROR_CHARS] for s in steps if s["step"] == 0 and s["call_index"] == 0],
        "parse_errors": sum(s["kind"] == "parse_error" for s in steps), "candidates": rows,
        "admitted_task_ids": sorted({r["task_id"] for r in rows if r["task_id"]}),
    }  # fmt: skip


def link_counts(rows: Sequence[dict], families: Sequence[str]) -> dict:
    """Each link's (successes, trials) from exploration rows, and admitted tasks per family per round."""
    calls = (sum(r["called_gap_tool"] for r in rows), len(rows))
    aimed = [c for r in rows for c in r["candidates"] if c["status"] == "ok" and c["calls_gap_tool"]]
    passed = (sum(c["task_id"] is not None for c in aimed), len(aimed))
    own = (
        sum(any(c["task_id"] and r["gap_tool"] in c["tools"] for c in r["candidates"]) for r in rows),
        len(rows),
    )
    tool_of = {r["gap_family"]: r["gap_tool"] for r in rows}
    rounds = sorted({r["round"] for r in rows})
    per_family = {}
    for family in families:
        tool = tool_of.get(family)
        per_family[family] = [len({c["task_id"] for r in rows if r["round"] == k for c in r["candidates"]
                                   if c["task_id"] and tool in c["tools"]}) for k in rounds]  # fmt: skip
    return {
        "call": calls,
        "pass": passed,
        "own_admitted": own,
        "rounds": rounds,
        "admitted_per_family": per_family,
    }


def threshold_met(counts: dict) -> tuple[bool, list[str]]:
    """Whether `THRESHOLD` holds, and a line for each part that fails."""
    failed = []
    k, n = counts["call"]
    if n == 0 or k / n < MIN_CALL_YIELD:
        failed.append(
            f"(a) {k} of {n} explorations called their named gap tool (needs >= {MIN_CALL_YIELD:.0%})"
        )
    for family, per_round in counts["admitted_per_family"].items():
        short = [i for i, count in enumerate(per_round) if count < MIN_ADMITTED_PER_FAMILY]
        if short or not per_round:
            failed.append(f"(c) {family}: {per_round or [0]} admitted tasks by round (needs >= "
                          f"{MIN_ADMITTED_PER_FAMILY} in every round)")  # fmt: skip
    return not failed, failed


def proportion_figure(successes: int, trials: int) -> dict:
    """A proportion as a figure in %, with its Wilson interval (value 0 and no interval without trials)."""
    from coevolve.benchmarks.record import figure

    interval = wilson_interval(successes, trials)
    value = 100 * successes / trials if trials else 0.0
    return figure(value, "%", None if interval is None else (100 * interval[0], 100 * interval[1]))


def figures(counts: dict) -> dict:
    """The result row's figures of one (teacher, variant)."""
    from coevolve.benchmarks.record import figure

    (ck, cn), (pk, pn), (ok, on) = counts["call"], counts["pass"], counts["own_admitted"]
    out = {"explorations": figure(cn, ""),
           "(a) explorations calling the named gap tool": proportion_figure(ck, cn),
           "(b) candidates calling it": figure(pn, ""),
           "(b) candidates calling it that verification admits": proportion_figure(pk, pn),
           "(c) explorations admitting a task of their family": proportion_figure(ok, on)}  # fmt: skip
    rounds = max(1, len(counts["rounds"]))
    for family, per_round in counts["admitted_per_family"].items():
        out[f"(c) admitted tasks per round, {family}"] = figure(sum(per_round) / rounds, "")
    out["threshold met"] = figure(int(threshold_met(counts)[0]), "")
    return out
