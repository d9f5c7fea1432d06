"""Per-run tables of the learning benchmark, read from the runs' artifacts through the DuckDB catalog:
stage seconds, signals and admitted tasks, the teacher's output and why candidates were rejected."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.contracts.abstract import STATUSES, CandidateStatus
from coevolve.contracts.counts import count_columns_sql
from coevolve.contracts.verify import ADMITTED, Verdict, sql_list

_ADMITTED = sql_list(ADMITTED)

FEEDBACK_STAGES = ("signals", "explore", "triples", "abstract", "verify", "merge")
STAGE_ORDER = ("bootstrap", "baseline", "rollout", *FEEDBACK_STAGES, "grpo_update", "evaluate")


def run_sql(root: Path, sql: str) -> pl.DataFrame:
    from coevolve.storage.catalog import query

    return pl.from_arrow(query(root, sql))


def scalar_table(root: Path, names: Sequence[str], sql: str, fallback: dict[str, type]) -> pl.DataFrame:
    """`sql` over the runs `names` (`RUNS` in it stands for their quoted list); an empty frame of the
    `fallback` schema when there are no runs or no run produced the view."""
    import duckdb

    if not names:
        return pl.DataFrame(schema=fallback)
    try:
        return run_sql(root, sql.replace("RUNS", ", ".join(f"'{n}'" for n in names)))
    except duckdb.CatalogException:  # the view does not exist: no run of the benchmark produced it
        return pl.DataFrame(schema=fallback)


def stage_seconds(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Wall seconds per (run, stage) from the stage manifests (a stage copied by a fork counts what it
    took to compute in its source run), and how many of the stage's rounds were copied (`forked`)."""
    rows = []
    for name in names:
        for path in (root / f"run={name}").glob("round=*/stage=*/_manifest.json"):
            manifest = json.loads(path.read_text())
            rows.append({"run": name, "stage": manifest["stage"], "seconds": float(manifest["seconds"]),
                         "forked": int(bool(manifest.get("forked_from")))})  # fmt: skip
    schema = {"run": pl.String, "stage": pl.String, "seconds": pl.Float64, "forked": pl.Int64}
    return pl.DataFrame(rows, schema=schema).group_by("run", "stage").agg(pl.col("seconds", "forked").sum())


def evolution_counts(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run: signals fired per kind, synthesized tasks accepted/retained, rollout episodes on them
    (`synth_rollouts`: what the policy actually trained on), `revisited` tasks (drawn for rollouts in two
    or more rounds: the only tasks the forgetting signal can fire on), generated tokens."""
    signals = scalar_table(root, names, """
        SELECT run, kind, count(*) AS n FROM signals WHERE run IN (RUNS) GROUP BY ALL""",
        {"run": pl.String, "kind": pl.String, "n": pl.Int64})  # fmt: skip
    verdicts = scalar_table(root, names, """
        SELECT run, round, outcome, count(*) AS n FROM verifications WHERE run IN (RUNS) GROUP BY ALL""",
        {"run": pl.String, "round": pl.Int64, "outcome": pl.String, "n": pl.Int64})  # fmt: skip
    tokens = scalar_table(root, names, """
        SELECT run, source, sum(completion_tokens) AS tokens FROM trajectories WHERE run IN (RUNS)
        GROUP BY ALL""", {"run": pl.String, "source": pl.String, "tokens": pl.Int64})  # fmt: skip
    drawn = scalar_table(root, names, f"""
        SELECT run, count(*) AS synth_rollouts FROM trajectories t WHERE run IN (RUNS) AND source = 'rollout'
        AND task_id IN (SELECT task_id FROM verifications v WHERE v.run = t.run
                        AND outcome IN {_ADMITTED}) GROUP BY ALL""",
        {"run": pl.String, "synth_rollouts": pl.Int64})  # fmt: skip
    revisited = scalar_table(root, names, """
        SELECT run, count(*) AS revisited FROM (
            SELECT run, task_id FROM trajectories WHERE run IN (RUNS) AND source = 'rollout'
            GROUP BY ALL HAVING count(DISTINCT round) > 1) GROUP BY ALL""",
        {"run": pl.String, "revisited": pl.Int64})  # fmt: skip
    base = pl.DataFrame({"run": list(names)}, schema={"run": pl.String})
    kinds = signals.pivot(on="kind", index="run", values="n") if signals.height else base
    admitted = (
        verdicts.filter(pl.col("outcome").is_in(ADMITTED))
        .group_by("run")
        .agg(admitted=pl.col("n").sum())
    )
    token_cols = tokens.pivot(on="source", index="run", values="tokens") if tokens.height else base
    token_cols = token_cols.rename({c: f"{c}_tokens" for c in token_cols.columns if c != "run"})
    out = base.join(kinds, on="run", how="left").join(admitted, on="run", how="left")
    out = out.join(drawn, on="run", how="left").join(revisited, on="run", how="left")
    return out.join(token_cols, on="run", how="left").fill_null(0)


def teacher_output(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run: the teacher's candidates by status, then the verdicts on the `ok` ones and on the
    duplicates verification checked in place of a discarded one (`stand_ins`, `stages.verify.verification.sibling_duplicates`):
    is the teacher the bottleneck, or verification?"""
    return scalar_table(root, names, f"""
        SELECT c.run, count(*) AS candidates, {count_columns_sql('c.status', STATUSES)},
               count(*) FILTER (c.status = '{CandidateStatus.DUPLICATE}' AND v.outcome IS NOT NULL) AS stand_ins,
               count(*) FILTER (v.outcome IN {_ADMITTED}) AS admitted,
               count(*) FILTER (v.outcome = '{Verdict.DISCARD}') AS discarded
        FROM candidates c LEFT JOIN verifications v USING (run, round, candidate_id)
        WHERE c.run IN (RUNS) GROUP BY ALL ORDER BY c.run""",
        {"run": pl.String, "candidates": pl.Int64})  # fmt: skip


def exploration_breadth(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run: exploration groups, the distinct calls that ran in them (`calls`), and how many of those are
    no call of the explored task's reference solution (`new_calls`). An exploration that only repeats the
    task's solution gives the abstraction nothing but that task again."""
    from coevolve.core import ToolCall

    triples = scalar_table(root, names, """
        SELECT DISTINCT run, group_id, task_id, tool, arguments FROM triples WHERE run IN (RUNS) AND ok""",
        {"run": pl.String, "group_id": pl.String, "task_id": pl.String, "tool": pl.String,
         "arguments": pl.String})  # fmt: skip
    tasks = scalar_table(root, names, """
        SELECT DISTINCT task_id, solution FROM tasks WHERE run IN (RUNS)
        AND task_id IN (SELECT task_id FROM triples WHERE run IN (RUNS))""",
        {"task_id": pl.String, "solution": pl.String})  # fmt: skip
    reference = {row["task_id"]: {ToolCall(**c).signature() for turn in json.loads(row["solution"] or "[]")
                                  for c in turn} for row in tasks.to_dicts()}  # fmt: skip
    calls = {}
    for row in triples.to_dicts():
        call = ToolCall(name=row["tool"], arguments=json.loads(row["arguments"])).signature()
        calls[(row["run"], row["group_id"], call)] = call not in reference.get(row["task_id"], set())
    rows = [{"run": run, "group_id": group, "new": new} for (run, group, _), new in calls.items()]
    frame = pl.DataFrame(rows, schema={"run": pl.String, "group_id": pl.String, "new": pl.Boolean})
    return frame.group_by("run").agg(groups=pl.col("group_id").n_unique(), calls=pl.len(),
                                     new_calls=pl.col("new").sum().cast(pl.Int64)).sort("run")  # fmt: skip


def rejections(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run, how often each reason made a candidate not `ok` or a verified one discarded, with quoted
    JSON, ids and numbers folded (`solution item N is neither ...`)."""
    folded = (r"regexp_replace(regexp_replace(regexp_replace(coalesce(reason, ''), '\{.*\}|\[.*\]', '{…}', 'g'), "
              r"'\b[0-9a-f]{12,}\b', '<id>', 'g'), '[0-9]+(\.[0-9]+)?', 'N', 'g')")
    return scalar_table(root, names, f"""
        WITH reasons AS (
            SELECT run, 'candidate ' || status AS verdict, reason FROM candidates WHERE run IN (RUNS)
                AND status <> '{CandidateStatus.OK}'
            UNION ALL
            SELECT run, 'verification ' || outcome, reason FROM verifications WHERE run IN (RUNS)
                AND outcome = '{Verdict.DISCARD}')
        SELECT run, verdict, {folded} AS reason, count(*) AS n
        FROM reasons GROUP BY ALL ORDER BY run, n DESC, verdict, reason""",
        {"run": pl.String, "verdict": pl.String, "reason": pl.String, "n": pl.Int64})  # fmt: skip


def top_reasons(per_run: pl.DataFrame, top: int = 12) -> pl.DataFrame:
    """The `top` most frequent reasons of `rejections` over all its runs."""
    return (per_run.group_by("verdict", "reason").agg(pl.col("n").sum())
            .sort(["n", "verdict", "reason"], descending=[True, False, False]).head(top))  # fmt: skip


def accepted_per_round(root: Path, names: Sequence[str]) -> pl.DataFrame:
    return scalar_table(root, names, f"""
        SELECT run, round, count(*) FILTER (outcome IN {_ADMITTED}) AS admitted, count(*) AS verified
        FROM verifications WHERE run IN (RUNS) GROUP BY ALL ORDER BY run, round""",
        {"run": pl.String, "round": pl.Int64, "admitted": pl.Int64, "verified": pl.Int64})  # fmt: skip


def rescored(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run, split and re-evaluation (`coevolve eval --run R --env-seed N`, under `<root>/evaluations/`):
    the policy's success on tasks of other environment options that no run used."""
    rows = []
    for name in names:
        found = [*(root / "evaluations" / name).glob("round=*/evaluation.json"),  # as written before the artifact
                 *(root / "evaluations" / f"run={name}").glob("round=[0-9]*/stage=*/evaluation.json")]  # not baselines
        for path in sorted(found):
            summary = json.loads(path.read_text())
            for split, success in summary["success"].items():
                rows.append({"run": name, "round": summary["round"], "env": summary["env"],
                             "options": json.dumps(summary["options"], sort_keys=True), "split": split,
                             "tasks": summary["tasks"][split], "success": float(success)})  # fmt: skip
    schema = {"run": pl.String, "round": pl.Int64, "env": pl.String, "options": pl.String, "split": pl.String,
              "tasks": pl.Int64, "success": pl.Float64}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)
