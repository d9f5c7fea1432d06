"""Held-out outcomes of the learning benchmark's runs: one row per (run, updates, split, task), read from
storage or from the record an earlier invocation of the same plan wrote (`outcomes.parquet`), and the
success curves over updates."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.arms import OWN_TEACHER_ARMS, TEACHERLESS_ARMS, Plan
from coevolve.benchmarks.learning.tables import scalar_table


def arm_of_run() -> pl.Expr:
    """The arm of a run name (`<prefix>-<arm>-s<seed>`, `plan.run_name`), from the `run` column."""
    return pl.col("run").str.extract(r"^[^-]+-(.+)-s\d+$", 1)


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
        arm=arm_of_run(),
        seed=pl.col("run").str.extract(r"-s(\d+)$", 1).cast(pl.Int64),
    )


OUTCOMES = "outcomes.parquet"
OUTCOME_SCHEMA = {"run": pl.String, "arm": pl.String, "seed": pl.Int64, "updates": pl.Int64, "split": pl.String,
                  "task_id": pl.String, "family": pl.String, "success": pl.Float64, "plan": pl.String,
                  "code": pl.String}  # fmt: skip
"""`<out>/outcomes.parquet`: one row per (run, updates, split, task), `success` the task's mean over its
episodes, `plan` the `plan_fingerprint` of the invocation that measured it, `code` the `code_version` that
computed it. Committed with the report, it lets a later invocation on a fresh machine add seeds
(`first_seed`) and still report, and bootstrap, over every seed. Records written before these columns
changed read as they were meant: `success` of one episode per task as an integer, `family` (the task's, the
unit the bootstrap resamples) and `code` as null (a run recorded before code versions were kept counts as
computed by this code)."""


class MixedCodeError(ValueError):
    """Recorded outcomes of a plan were computed by another version of a stage than this code's."""


def code_version() -> str:
    """The stages' versions (`StageDef.version`, bumped whenever a stage's output for the same inputs
    changes) as one key. A refactor keeps it; a change of what any stage computes moves it, and outcomes
    measured before and after are two experiments."""
    from coevolve.core import content_hash
    from coevolve.stages.round_plan import STAGES

    return content_hash([[stage.name, stage.version] for stage in STAGES.values()])[:12]


def plan_fingerprint(plan: Plan, root: Path, *, teacher: bool = True) -> str:
    """What makes two invocations' outcomes one experiment: the config file's text, the rounds, the
    overrides (the storage root left out of the warm start's path: its directory name is a content key,
    the same on every machine) and the settings the teacher was built with."""
    import hashlib

    parts = {"config": plan.config.read_text(), "rounds": plan.rounds,
             "overrides": [o.replace(str(root), "<root>") for o in plan.overrides],
             "teacher": plan.teacher.key_fields() if teacher and plan.teacher and plan.teacher_model else None}  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def same_plan(fingerprint: str, teacherless: str | None = None) -> pl.Expr:
    """Rows (with `run` and `plan` columns) measured under this plan: its `fingerprint`, or, for a run of an arm
    that does not use the evolving arms' teacher, the plan's fingerprint without the teacher build
    (`teacherless`): an invocation of such arms alone builds no teacher, and their runs do not depend on it."""
    mine = pl.col("plan") == fingerprint
    if teacherless is None or teacherless == fingerprint:
        return mine
    return mine | (arm_of_run().is_in([*TEACHERLESS_ARMS, *OWN_TEACHER_ARMS]) & (pl.col("plan") == teacherless))


def read_parquet_named(path: Path) -> pl.DataFrame:
    """A record's Parquet file; one that does not read raises naming it."""
    try:
        return pl.read_parquet(path)
    except Exception as exc:  # polars raises several kinds for a corrupt or foreign file
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from exc


def recorded_outcomes(path: Path) -> pl.DataFrame:
    """The outcomes an earlier invocation wrote to `path` (none when there is no file); a file that is not
    such a table raises naming it."""
    if not path.exists():
        return pl.DataFrame(schema=OUTCOME_SCHEMA)
    frame = read_parquet_named(path)
    for column in ("family", "code"):  # a record written before families, or code versions, were kept
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(column))
    missing = sorted(set(OUTCOME_SCHEMA) - set(frame.columns))
    if missing:
        raise ValueError(f"{path}: not an outcomes table, missing columns {missing}")
    return frame.select(list(OUTCOME_SCHEMA)).cast(OUTCOME_SCHEMA)


def merge_outcomes(stored: pl.DataFrame, recorded: pl.DataFrame, names: Sequence[str], fingerprint: str,
                   code: str, teacherless: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """The outcomes to report on (the stored evals of `names`, and the recorded ones of this plan for
    those of `names` with none stored) and the table to record (the reported ones and every other
    recorded row: nothing recorded is lost, a stored run replaces its recorded rows). A recorded run of
    this plan computed by another `code_version` is refused (`MixedCodeError`): its stages computed
    something else than this code's would."""
    stored = (stored.with_columns(plan=pl.lit(fingerprint), code=pl.lit(code))
              .select(list(OUTCOME_SCHEMA)).cast(OUTCOME_SCHEMA))  # fmt: skip
    have = set(stored["run"])
    mine = same_plan(fingerprint, teacherless) & pl.col("run").is_in(list(names))
    from_record = recorded.filter(mine & ~pl.col("run").is_in(list(have)))
    other = sorted(set(from_record.filter(pl.col("code").is_not_null() & (pl.col("code") != code))["run"]))
    if other:
        raise MixedCodeError(
            f"outcomes.parquet: {', '.join(other)} were computed by stage versions other than this code's "
            f"({code}, `StageDef.version`); rerun them with this code, or report them with the code that made them"
        )
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
                          plan_fingerprint(plan, root), code_version(), plan_fingerprint(plan, root, teacher=False))  # fmt: skip
