"""Rows an auditor can follow past the totals: every exploration, every admitted task, the tools each
evaluated task called; and the coverage gap's link table computed from those rows alone.

Read from a run's own artifacts (`explorations`, `signals`, `triples`, `candidates`, `verifications`,
`datasets`, `tasks`, `evals`, `steps`; docs/sql.md) and recorded by `run_record` beside the plan's outcomes
(`runs/audit_explorations.parquet`, `runs/audit_admitted.parquet`, `runs/audit_eval_tools.parquet`), a few
dozen kilobytes per run. Lists are JSON strings, so the files read the same from DuckDB, Polars or pandas:

- an exploration: its signal's kind, the tools the signal names (an `unused` signal's tool; a rare signal's
  tool or bigram patterns), the tools its context names, the tools its episodes called successfully, its
  candidates with their tools and verdicts (`<status or outcome>: <reason>`), the task ids it admitted;
- an admitted task (the run's last dataset version, joined after D_0): query, solution, verdict;
- an evaluated episode: split, task, family, success, the tools it called (in order) and those that ran.

`link_table` follows the gap down the loop from these rows: explorations whose signal names a gap tool,
those that then called it (the exploration yield), gap tools called at all, candidates and admitted tasks
calling one, and the gap split's final successes with and without a gap tool called.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.tables import scalar_table

EXPLORATION_COLUMNS = {"run": pl.String, "round": pl.Int64, "exploration_id": pl.String, "signal_kind": pl.String,
                       "signal_tools": pl.String, "context_tools": pl.String, "called_ok": pl.String,
                       "candidates": pl.Int64, "candidate_tools": pl.String, "verdicts": pl.String,
                       "admitted_task_ids": pl.String}  # fmt: skip
ADMITTED_COLUMNS = {"run": pl.String, "added_round": pl.Int64, "task_id": pl.String, "exploration_id": pl.String,
                    "query": pl.String, "solution": pl.String, "verdict": pl.String, "reason": pl.String}  # fmt: skip
EVAL_COLUMNS = {"run": pl.String, "round": pl.Int64, "split": pl.String, "task_id": pl.String, "family": pl.String,
                "trajectory_id": pl.String, "success": pl.Boolean, "tools_called": pl.String,
                "tools_ok": pl.String}  # fmt: skip


def named_tools(kind: str | None, evidence: str | None) -> list[str]:
    """The tools a signal's evidence names: an `unused` signal's `tool`, a rare signal's tool (or bigram)
    patterns; none for forgetting, boundary, a rare signal over tasks, or no signal."""
    got = json.loads(evidence or "{}")
    if got.get("tool"):
        return [got["tool"]]
    if kind != "rare" or got.get("pattern_kind") not in ("tool", "bigram"):
        return []
    return list(dict.fromkeys(tool for p in got.get("patterns") or [] for tool in str(p["pattern"]).split(">")))


def exploration_rows(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """One row per exploration of the runs `names` (module docstring)."""
    explorations = scalar_table(root, names, "SELECT run, round, exploration_id, signal_id, kind, context FROM "
                                "explorations WHERE run IN (RUNS)", {"run": pl.String, "round": pl.Int64,
                                "exploration_id": pl.String, "signal_id": pl.String, "kind": pl.String,
                                "context": pl.String})  # fmt: skip
    signals = scalar_table(root, names, "SELECT run, signal_id, evidence FROM signals WHERE run IN (RUNS)",
                           {"run": pl.String, "signal_id": pl.String, "evidence": pl.String})  # fmt: skip
    called = scalar_table(root, names, "SELECT DISTINCT run, exploration_id, tool FROM triples WHERE run IN (RUNS) "
                          "AND ok", {"run": pl.String, "exploration_id": pl.String, "tool": pl.String})  # fmt: skip
    candidates = scalar_table(root, names, """
        SELECT c.run, c.exploration_id, c.solution, coalesce(v.outcome, c.status) AS verdict,
               coalesce(v.reason, c.reason, '') AS reason, v.task_id
        FROM candidates c LEFT JOIN verifications v ON v.run = c.run AND v.candidate_id = c.candidate_id
        WHERE c.run IN (RUNS)""", {"run": pl.String, "exploration_id": pl.String, "solution": pl.String,
                                   "verdict": pl.String, "reason": pl.String, "task_id": pl.String})  # fmt: skip
    evidence = {(r["run"], r["signal_id"]): r["evidence"] for r in signals.iter_rows(named=True)}
    rows = []
    for e in explorations.sort("run", "round", "exploration_id").iter_rows(named=True):
        key = (pl.col("run") == e["run"]) & (pl.col("exploration_id") == e["exploration_id"])
        mine = candidates.filter(key)
        admitted = mine.filter(pl.col("verdict").is_in(["accept", "retain"]))["task_id"].drop_nulls()
        rows.append({
            "run": e["run"], "round": e["round"], "exploration_id": e["exploration_id"], "signal_kind": e["kind"],
            "signal_tools": json.dumps(named_tools(e["kind"], evidence.get((e["run"], e["signal_id"])))),
            "context_tools": json.dumps((json.loads(e["context"] or "{}") or {}).get("tools") or []),
            "called_ok": json.dumps(sorted(called.filter(key)["tool"])),
            "candidates": mine.height,
            "candidate_tools": json.dumps([solution_tools(s) for s in mine["solution"]]),
            "verdicts": json.dumps([f"{v}: {r}" if r else v for v, r in zip(mine["verdict"], mine["reason"], strict=True)]),
            "admitted_task_ids": json.dumps(sorted(set(admitted))),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=EXPLORATION_COLUMNS)


def admitted_rows(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """One row per task of a run's last dataset version that joined after D_0, with the verdict that
    admitted it."""
    return scalar_table(root, names, """
        WITH versions AS (SELECT run, max(dataset_version) AS last FROM datasets WHERE run IN (RUNS) GROUP BY run),
        admitted AS (SELECT DISTINCT d.run, d.task_id, d.added_round FROM datasets d JOIN versions v USING (run)
                     WHERE d.dataset_version = v.last AND d.added_round > 0),
        tasks_once AS (SELECT DISTINCT ON (run, task_id) run, task_id, turns, solution, lineage FROM tasks
                       WHERE run IN (RUNS)),
        verdicts AS (SELECT DISTINCT ON (run, task_id) run, task_id, outcome, reason FROM verifications
                     WHERE run IN (RUNS) AND task_id IS NOT NULL)
        SELECT a.run, a.added_round, a.task_id, json_extract_string(t.lineage, '$.exploration_id') AS exploration_id,
               array_to_string(CAST(json_extract_string(t.turns, '$[*]') AS VARCHAR[]), ' / ') AS query,
               t.solution, v.outcome AS verdict, v.reason
        FROM admitted a JOIN tasks_once t USING (run, task_id) LEFT JOIN verdicts v USING (run, task_id)
        ORDER BY a.run, a.added_round, a.task_id""", ADMITTED_COLUMNS)  # fmt: skip


def eval_tool_rows(root: Path, names: Sequence[str], splits: Collection[str] | None = None) -> pl.DataFrame:
    """One row per evaluation episode of the runs `names` (only `splits` when given): the tools it called in
    order (`tools_called`) and the distinct tools whose call ran (`tools_ok`)."""
    evals = scalar_table(root, names, "SELECT run, round, split, task_id, family, trajectory_id, success FROM evals "
                         "WHERE run IN (RUNS)", {c: t for c, t in EVAL_COLUMNS.items() if not c.startswith("tools")})
    if splits is not None:
        evals = evals.filter(pl.col("split").is_in(list(splits)))
    calls = scalar_table(root, names, """
        SELECT run, trajectory_id, list(tool ORDER BY step, call_index) AS called,
               list(DISTINCT tool) FILTER (WHERE ok) AS ran
        FROM steps WHERE run IN (RUNS) AND source LIKE 'eval:%' AND kind = 'call' AND tool IS NOT NULL
        GROUP BY run, trajectory_id""", {"run": pl.String, "trajectory_id": pl.String,
                                         "called": pl.List(pl.String), "ran": pl.List(pl.String)})  # fmt: skip
    joined = evals.join(calls, on=["run", "trajectory_id"], how="left")
    return joined.with_columns(
        tools_called=pl.col("called").fill_null([]).map_elements(lambda x: json.dumps(list(x)), return_dtype=pl.String),
        tools_ok=pl.col("ran").fill_null([]).map_elements(lambda x: json.dumps(sorted(x)), return_dtype=pl.String),
    ).select(list(EVAL_COLUMNS)).sort("run", "round", "split", "task_id", "trajectory_id")  # fmt: skip


def solution_tools(solution: str | None) -> list[str]:
    """Tool names of a solution as `tasks` (calls per turn) or `candidates` (a flat list) store it."""
    calls = json.loads(solution or "[]")
    flat = [c for turn in calls for c in turn] if calls and isinstance(calls[0], list) else calls
    return [call["name"] for call in flat if isinstance(call, dict) and "name" in call]


LINK_COLUMNS = {"run": pl.String, "explorations": pl.Int64, "named_gap": pl.Int64, "called_named": pl.Int64,
                "called_gap": pl.Int64, "gap_candidates": pl.Int64, "admitted_gap": pl.Int64,
                "gap_eval_final": pl.Int64, "gap_solved": pl.Int64, "gap_solved_calling_gap": pl.Int64}  # fmt: skip


def link_table(explorations: pl.DataFrame, admitted: pl.DataFrame, evals: pl.DataFrame,
               gap: dict[str, set[str]]) -> pl.DataFrame:  # fmt: skip
    """Per run with gap tools (`gap`: run -> tools), from the audit rows alone: explorations; those whose
    signal names a gap tool (`named_gap`) and, of them, those whose episodes called a named gap tool that ran
    (`called_named`: the yield is called_named / named_gap); explorations calling any gap tool that ran;
    candidates and admitted tasks whose solution calls one; the gap splits' episodes of the run's last
    evaluated round, their successes, and the successes that called a gap tool that ran."""
    rows = []
    for run, tools in sorted(gap.items()):
        mine = explorations.filter(pl.col("run") == run).to_dicts()
        named = [e for e in mine if tools & set(json.loads(e["signal_tools"]))]
        gap_evals = evals.filter((pl.col("run") == run) & pl.col("split").str.starts_with("gap"))
        final = gap_evals.filter(pl.col("round") == gap_evals["round"].max()).to_dicts() if gap_evals.height else []
        solved = [e for e in final if e["success"]]
        rows.append({
            "run": run, "explorations": len(mine), "named_gap": len(named),
            "called_named": sum(bool(tools & set(json.loads(e["signal_tools"])) & set(json.loads(e["called_ok"])))
                                for e in named),
            "called_gap": sum(bool(tools & set(json.loads(e["called_ok"]))) for e in mine),
            "gap_candidates": sum(bool(tools & set(c)) for e in mine for c in json.loads(e["candidate_tools"])),
            "admitted_gap": sum(bool(tools & set(solution_tools(s)))
                                for s in admitted.filter(pl.col("run") == run)["solution"]),
            "gap_eval_final": len(final), "gap_solved": len(solved),
            "gap_solved_calling_gap": sum(bool(tools & set(json.loads(e["tools_ok"]))) for e in solved),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=LINK_COLUMNS)
