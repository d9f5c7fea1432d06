"""`coevolve evolution --run RUN`: what the data evolution of a run did, in a few lines and one SQL query.

    coevolve evolution --run demo

Prints the signal mix, the explorations, the candidates by status and their verdicts per distinct solution
(`coevolve.contracts.counts`, the same counts and labels as the round line), the tasks merged
into the dataset, how the rollouts of later rounds did on them, one admitted task (its query, solution and
verdict) and the SQL that follows that task back to the signal it came from, ready for `coevolve sql`.
Read through the DuckDB views only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LINEAGE_SQL = """SELECT s.round AS signal_round, s.kind, s.trajectory_id AS signal_trajectory, e.exploration_id,
       c.candidate_id, v.outcome, t.task_id, count(later.trajectory_id) AS later_rollouts,
       avg(later.success::INT) AS later_success
FROM tasks t
JOIN verifications v ON v.run = t.run AND v.verification_id = json_extract_string(t.lineage, '$.verification_id')
JOIN candidates c ON c.run = t.run AND c.candidate_id = v.candidate_id
JOIN explorations e ON e.run = t.run AND e.exploration_id = c.exploration_id
LEFT JOIN signals s ON s.run = t.run AND s.signal_id = e.signal_id
LEFT JOIN trajectories later ON later.run = t.run AND later.task_id = t.task_id AND later.source = 'rollout'
WHERE t.run = '{run}' AND t.task_id = '{task}'
GROUP BY ALL"""
"""The lineage of one synthesized task: signal -> exploration -> candidate -> verification -> task -> the
rollouts that trained on it."""


def evolution_report(root: Path, run: str) -> list[str]:
    """The report's lines (what the run's evolution did); a run that never evolved says so."""
    from coevolve.storage.catalog import ArtifactFiles, query
    from coevolve.storage.layout import root_option

    views = set(ArtifactFiles.scan(root).readable)
    if "signals" not in views:
        return [f"run '{run}' has no data evolution yet (evolve.every: 0, or no evolving round has run)"]

    def rows(sql: str) -> list[dict[str, Any]]:
        return query(root, sql.replace("RUN", f"'{run}'")).to_pylist()

    def counts(view: str, column: str) -> str:
        found = rows(f"SELECT {column} AS k, count(*) AS n FROM {view} WHERE run = RUN GROUP BY ALL ORDER BY n DESC")
        return ", ".join(f"{r['n']} {r['k']}" for r in found) or "none"

    lines = [f"data evolution of run '{run}':",
             f"  signals         {counts('signals', 'kind')}",
             f"  explorations    {counts('explorations', 'status')}" if "explorations" in views else "",
             *(candidate_lines(rows, "verifications" in views) if "candidates" in views else [])]  # fmt: skip
    admitted = rows("SELECT task_id, turns, solution, family FROM tasks WHERE run = RUN AND source = 'synthesized' "
                    "ORDER BY round, task_id") if "tasks" in views else []  # fmt: skip
    lines.append(f"  merged tasks    {len(admitted)}")
    if not admitted:
        return [line for line in lines if line]
    drawn = rows("SELECT t.task_id, count(*) AS n, sum(r.success::INT) AS solved FROM tasks t JOIN trajectories r "
                 "ON r.run = t.run AND r.task_id = t.task_id AND r.source = 'rollout' WHERE t.run = RUN AND "
                 "t.source = 'synthesized' GROUP BY ALL")  # fmt: skip
    episodes, solved = sum(r["n"] for r in drawn), sum(r["solved"] for r in drawn)
    lines.append(f"  trained on      {len(drawn)} of them in later rounds: {episodes} rollout episodes, "
                 f"{solved} solved ({solved / episodes:.0%})" if episodes else
                 "  trained on      none yet (a later round draws them)")  # fmt: skip
    example = next((a for a in admitted if a["task_id"] in {r["task_id"] for r in drawn}), admitted[0])
    verdict = rows(f"SELECT v.outcome, v.reason FROM tasks t JOIN verifications v ON v.run = t.run AND "
                   f"v.verification_id = json_extract_string(t.lineage, '$.verification_id') "
                   f"WHERE t.run = RUN AND t.task_id = '{example['task_id']}'")  # fmt: skip
    calls = "; ".join(f"{c['name']}({json.dumps(c['arguments'])})" for turn in json.loads(example["solution"] or "[]")
                      for c in turn)  # fmt: skip
    lines += ["", f"one admitted task ({example['family']}, {example['task_id']}):",
              f"  query     {json.loads(example['turns'])[0]}", f"  solution  {calls}"]  # fmt: skip
    if verdict:
        lines.append(f"  verdict   {verdict[0]['outcome']}: {verdict[0]['reason']}")
    sql = " ".join(LINEAGE_SQL.format(run=run, task=example["task_id"]).split())
    lines += ["", "its lineage, back to the signal that led to it:", f'  coevolve sql{root_option(root)} "{sql}"']
    return [line for line in lines if line]


def candidate_lines(rows: Any, verified: bool) -> list[str]:
    """The run's candidates and verdicts per distinct solution, labelled as the round line labels them, then
    the wordings verification checked (its rows: a solution's own wording, then its duplicates in turn)."""
    from coevolve.contracts.counts import CandidateCounts

    def per(view: str, column: str) -> dict[str, int]:
        return {r["k"]: r["n"] for r in rows(f"SELECT {column} AS k, count(*) AS n FROM {view} WHERE run = RUN GROUP BY ALL")}

    counts = CandidateCounts.of(per("candidates", "status"), per("verifications", "outcome") if verified else None)
    lines = [f"  candidates      {counts.label()}"]
    if counts.wordings_checked is not None:
        lines.append(f"  verifications   {counts.wordings_checked} wordings checked (each solution's own, then its "
                     "duplicates in turn until one passed)")  # fmt: skip
    return lines
