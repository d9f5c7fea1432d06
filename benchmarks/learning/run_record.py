"""The per-run tables of a plan's report (signals, tokens, seconds, the teacher's output, coverage, the gap's
links) and its audit rows (`audit`: one per exploration, admitted task and evaluation episode), recorded
beside its outcomes in `<out>/runs/<table>.parquet`, so a report covers every recorded run
of the plan, those whose storage is gone too (an earlier sitting, another machine).

Each row carries the `plan` fingerprint it was measured under. The rows of the runs in this storage root are
read fresh and replace the record's rows of those runs under this plan; every other recorded row is kept.
A run recorded before these tables were kept has none: its tables are in the report.md committed with its
outcomes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.audit import admitted_rows, eval_tool_rows, exploration_rows
from coevolve.benchmarks.learning.coverage import coverage, gap_links
from coevolve.benchmarks.learning.outcomes import read_parquet_named, same_plan
from coevolve.benchmarks.learning.tables import (
    FEEDBACK_STAGES,
    accepted_per_round,
    evolution_counts,
    exploration_breadth,
    rejections,
    rescored,
    stage_seconds,
    teacher_output,
)

RECORD = "runs"
"""The folder in `--out` holding one Parquet file per table."""


def per_run_table(root: Path, names: Sequence[str], wall: dict[str, float]) -> pl.DataFrame:
    """Per run: signals, admitted tasks, tokens (`tables.evolution_counts`), stage and feedback seconds, and
    the wall seconds this invocation spent on it (`wall`)."""
    feedback = (
        stage_seconds(root, names).with_columns(feedback=pl.col("stage").is_in(FEEDBACK_STAGES))
        .group_by("run")
        .agg(stages_s=pl.col("seconds").sum(), feedback_s=pl.col("seconds").filter(pl.col("feedback")).sum(),
             forked_stages=pl.col("forked").sum())
    )
    return (
        evolution_counts(root, names)
        .join(feedback, on="run", how="left")
        .with_columns(
            feedback_share=pl.col("feedback_s") / pl.col("stages_s"),
            wall_s=pl.col("run").replace_strict(wall, default=None, return_dtype=pl.Float64),
        )
    )


TABLES: dict[str, Callable[[Path, Sequence[str]], pl.DataFrame]] = {
    "stage_seconds": stage_seconds,
    "admitted_per_round": accepted_per_round,
    "exploration": exploration_breadth,
    "teacher_output": teacher_output,
    "rejections": rejections,
    "coverage": coverage,
    "gap_links": gap_links,
    "rescored": rescored,
    "audit_explorations": exploration_rows,
    "audit_admitted": admitted_rows,
    "audit_eval_tools": eval_tool_rows,
}
"""Every recorded table but `per_run` (which also takes this invocation's wall seconds): name -> its reader
over the runs of a storage root."""

SORT = ("run", "round", "stage", "verdict", "reason", "options", "split", "exploration_id", "task_id", "trajectory_id")


def read_record(path: Path) -> pl.DataFrame | None:
    """A recorded table (None when there is none); a file that is not one raises naming it."""
    if not path.exists():
        return None
    frame = read_parquet_named(path)
    if not {"run", "plan"} <= set(frame.columns):
        raise ValueError(f"{path}: not a per-run table of the learning benchmark (no `run` and `plan` columns)")
    return frame


def merge_table(fresh: pl.DataFrame, recorded: pl.DataFrame | None, names: Sequence[str], fingerprint: str,
                wall_kept: bool = False, teacherless: str | None = None) -> pl.DataFrame:  # fmt: skip
    """The record to write: `fresh` (the runs `names` of this storage root, measured under `fingerprint`) and
    every recorded row but this plan's rows of those runs. With `wall_kept`, a run's `wall_s` keeps the larger
    of the recorded and the fresh figure: the invocation that computed a run spent its time, a later one that
    found it finished spent seconds."""
    fresh = fresh.with_columns(plan=pl.lit(fingerprint))
    if recorded is None:
        return _sorted(fresh)
    replaced = same_plan(fingerprint, teacherless) & pl.col("run").is_in(list(names))
    if wall_kept and "wall_s" in recorded.columns and fresh.height:
        before = recorded.filter(replaced).select("run", recorded_wall="wall_s")
        fresh = (fresh.join(before, on="run", how="left")
                 .with_columns(wall_s=pl.max_horizontal("wall_s", "recorded_wall")).drop("recorded_wall"))  # fmt: skip
    return _sorted(pl.concat([recorded.filter(~replaced), fresh], how="diagonal_relaxed"))


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort([c for c in SORT if c in frame.columns])


def recorded_tables(root: Path, names: Sequence[str], out: Path, fingerprint: str, runs: Sequence[str],
                    wall: dict[str, float], teacherless: str | None = None) -> dict[str, pl.DataFrame]:  # fmt: skip
    """Each table of the runs `runs` under this plan: read fresh for `names` (the runs in `root`), from the
    record for the others; the record in `out` updated first (written atomically: for runs whose storage is
    gone it is the only copy)."""
    from coevolve.storage.parquet import write_table

    fresh = {"per_run": per_run_table(root, names, wall)} | {name: read(root, names) for name, read in TABLES.items()}
    tables = {}
    for name, frame in fresh.items():
        path = out / RECORD / f"{name}.parquet"
        record = merge_table(frame, read_record(path), names, fingerprint, wall_kept=name == "per_run",
                             teacherless=teacherless)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_table(record.to_arrow(), path)
        tables[name] = record.filter(same_plan(fingerprint, teacherless) & pl.col("run").is_in(list(runs))).drop("plan")
    return tables
