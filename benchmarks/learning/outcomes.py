"""Held-out outcomes of the learning benchmark's runs: one row per (run, updates, split, task), read from
storage or from the record an earlier invocation of the same plan wrote (`outcomes.parquet`), and the
success curves over updates."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.plan import Plan
from coevolve.benchmarks.learning.tables import scalar_table


def per_task_evals(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """One row per (run, updates, split, task): `updates` = 0 for the baseline, r + 1 after round r;
    `success` the task's mean over its episodes (`eval.samples`; 0 or 1 with one episode)."""
    frame = scalar_table(root, names, """
        SELECT run, CASE WHEN stage = 'baseline' THEN 0 ELSE round + 1 END AS updates, split, task_id,
               any_value(family) AS family, avg(success::INT) AS success
        FROM evals WHERE run IN (RUNS) GROUP BY ALL""",
        {"run": pl.String, "updates": pl.Int64, "split": pl.String, "task_id": pl.String, "family": pl.String,
         "success": pl.Float64})  # fmt: skip
    return frame.with_columns(
        arm=pl.col("run").str.extract(r"^(?:learning|coverage)-(.+)-s\d+$", 1),
        seed=pl.col("run").str.extract(r"-s(\d+)$", 1).cast(pl.Int64),
    )


OUTCOMES = "outcomes.parquet"
OUTCOME_SCHEMA = {"run": pl.String, "arm": pl.String, "seed": pl.Int64, "updates": pl.Int64, "split": pl.String,
                  "task_id": pl.String, "family": pl.String, "success": pl.Float64, "plan": pl.String}  # fmt: skip
"""`<out>/outcomes.parquet`: one row per (run, updates, split, task), `success` the task's mean over its
episodes, `plan` the `plan_fingerprint` of the invocation that measured it. Committed with the report, it
lets a later invocation on a fresh machine add seeds (`first_seed`) and still report, and bootstrap, over
every seed. Records written before these columns changed read as they were meant: `success` of one episode
per task as an integer, `family` (the task's, the unit the bootstrap resamples) as null."""


def plan_fingerprint(plan: Plan, root: Path) -> str:
    """What makes two invocations' outcomes one experiment: the config file's text, the rounds, the
    overrides (the storage root left out of the warm start's path: its directory name is a content key,
    the same on every machine) and the settings the teacher was built with."""
    import hashlib

    parts = {"config": plan.config.read_text(), "rounds": plan.rounds,
             "overrides": [o.replace(str(root), "<root>") for o in plan.overrides],
             "teacher": plan.teacher.key_fields() if plan.teacher and plan.teacher_model else None}  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def recorded_outcomes(path: Path) -> pl.DataFrame:
    """The outcomes an earlier invocation wrote to `path` (none when there is no file); a file that is not
    such a table raises naming it."""
    if not path.exists():
        return pl.DataFrame(schema=OUTCOME_SCHEMA)
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several kinds for a corrupt or foreign file
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from exc
    if "family" not in frame.columns:  # a record written before families were kept
        frame = frame.with_columns(family=pl.lit(None, dtype=pl.String))
    missing = sorted(set(OUTCOME_SCHEMA) - set(frame.columns))
    if missing:
        raise ValueError(f"{path}: not an outcomes table, missing columns {missing}")
    return frame.select(list(OUTCOME_SCHEMA)).cast(OUTCOME_SCHEMA)


def merge_outcomes(stored: pl.DataFrame, recorded: pl.DataFrame, names: Sequence[str],
                   fingerprint: str) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """The outcomes to report on (the stored evals of `names`, and the recorded ones of this plan for
    those of `names` with none stored) and the table to record (the reported ones and every other
    recorded row: nothing recorded is lost, a stored run replaces its recorded rows)."""
    stored = stored.with_columns(plan=pl.lit(fingerprint)).select(list(OUTCOME_SCHEMA)).cast(OUTCOME_SCHEMA)
    have = set(stored["run"])
    mine = (pl.col("plan") == fingerprint) & pl.col("run").is_in(list(names))
    from_record = recorded.filter(mine & ~pl.col("run").is_in(list(have)))
    kept = recorded.filter(~(mine & pl.col("run").is_in(list(have))))
    return pl.concat([stored, from_record]), pl.concat([stored, kept]).sort("run", "updates", "split", "task_id")


def curves(evals: pl.DataFrame) -> pl.DataFrame:
    return (
        evals.group_by("arm", "seed", "updates", "split")
        .agg(success=pl.col("success").mean(), tasks=pl.len())
        .sort("arm", "seed", "split", "updates")
    )


def reported_outcomes(root: Path, plan: Plan, out: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The outcomes a report of `plan` covers (stored runs, then `out`'s record for the planned runs
    storage lacks) and the record to write back (`merge_outcomes`)."""
    planned = [plan.run_name(arm, seed) for arm, seed in plan.reported_runs()]
    return merge_outcomes(per_task_evals(root, planned), recorded_outcomes(out / OUTCOMES), planned,
                          plan_fingerprint(plan, root))  # fmt: skip
