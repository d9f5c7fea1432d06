"""Does the evolved data reach what the static training set never exercises? Per run, against its D_0:

- `unused_tools`: tools offered to D_0's tasks that no D_0 reference solution calls;
- `explored_unused`: how many of them an exploration of the run called (a call that ran, `triples.ok`);
- `admitted_unused`: how many of them an admitted task's solution calls;
- `admitted_multi`: admitted tasks whose solution makes two or more calls;
- `new_compositions`: admitted tasks whose ordered sequence of called tools (two or more) no D_0 task has.

An admitted task is one of the run's last dataset version that joined after D_0. The rare signal counts
offered-but-unused tools only with `signals.rare_unused` (a labelled deviation from the paper), so these
columns are how a run with and without it is compared.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.tables import scalar_table

COLUMNS = {"run": pl.String, "unused_tools": pl.Int64, "explored_unused": pl.Int64, "admitted_unused": pl.Int64,
           "admitted": pl.Int64, "admitted_multi": pl.Int64, "new_compositions": pl.Int64}  # fmt: skip
TASK_COLUMNS = {"run": pl.String, "task_id": pl.String, "env": pl.String, "split": pl.String, "family": pl.String,
                "source": pl.String, "turns": pl.String, "initial_state": pl.String, "solution": pl.String,
                "checker": pl.String, "lineage": pl.String, "admitted": pl.Boolean}  # fmt: skip


def called_tools(solution: str | None) -> list[str]:
    """The tool names a `tasks.solution` (JSON calls per turn) calls, in order."""
    return [call["name"] for turn in json.loads(solution or "[]") for call in turn]


def offered_tools(rows: Sequence[dict], env_options: dict[str, dict]) -> set[str]:
    """Tools the environment offers at the start of each task of `rows` (`tasks` rows)."""
    from coevolve import envs
    from coevolve.envs.base import Task

    offered: set[str] = set()
    for row in rows:
        task = Task.from_row(row)
        env = envs.make(task.env, **env_options.get(row["run"], {}))
        try:
            offered |= {schema["function"]["name"] for schema in env.reset(task).tools}
        finally:
            env.close()
    return offered


def coverage(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """One row per run of `names` that has a D_0."""
    from coevolve.config import load_config
    from coevolve.storage.layout import RunLayout

    env_options = {run: load_config(RunLayout(root, run).config_path).env.options for run in names}
    tasks = scalar_table(root, names, """
        WITH versions AS (SELECT run, max(dataset_version) AS last FROM datasets WHERE run IN (RUNS) GROUP BY run),
        chosen AS (
            SELECT d.run, d.task_id, d.dataset_version > 0 AS admitted FROM datasets d JOIN versions v USING (run)
            WHERE d.dataset_version = 0 OR (d.dataset_version = v.last AND d.added_round > 0))
        SELECT DISTINCT c.run, t.task_id, t.env, t.split, t.family, t.source, t.turns, t.initial_state, t.solution,
               t.checker, t.lineage, c.admitted
        FROM chosen c JOIN tasks t ON t.run = c.run AND t.task_id = c.task_id""", TASK_COLUMNS)  # fmt: skip
    explored = scalar_table(root, names, "SELECT DISTINCT run, tool FROM triples WHERE run IN (RUNS) AND ok",
                            {"run": pl.String, "tool": pl.String})  # fmt: skip
    rows = []
    for run in names:
        mine = tasks.filter(pl.col("run") == run)
        seed, admitted = mine.filter(~pl.col("admitted")).to_dicts(), mine.filter(pl.col("admitted")).to_dicts()
        if not seed:
            continue
        seed_calls = [called_tools(row["solution"]) for row in seed]
        unused = offered_tools(seed, env_options) - {tool for calls in seed_calls for tool in calls}
        compositions = {tuple(calls) for calls in seed_calls if len(calls) > 1}
        admitted_calls = [called_tools(row["solution"]) for row in admitted]
        rows.append({
            "run": run, "unused_tools": len(unused),
            "explored_unused": len(unused & set(explored.filter(pl.col("run") == run)["tool"])),
            "admitted_unused": len(unused & {tool for calls in admitted_calls for tool in calls}),
            "admitted": len(admitted), "admitted_multi": sum(len(calls) > 1 for calls in admitted_calls),
            "new_compositions": sum(len(calls) > 1 and tuple(calls) not in compositions for calls in admitted_calls),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=COLUMNS)
