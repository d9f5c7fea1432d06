"""Does the evolved data reach what the static training set never exercises? Per run, against its D_0:

- `unused_tools`: tools offered to D_0's tasks that no D_0 reference solution calls;
- `explored_unused`: how many of them an exploration of the run called (a call that ran, `triples.ok`);
- `admitted_unused`: how many of them an admitted task's solution calls;
- `admitted_multi`: admitted tasks whose solution makes two or more calls;
- `new_compositions`: admitted tasks whose ordered sequence of called tools (two or more) no D_0 task has.

`gap_links` follows the coverage regime's gap (the tools of `env.options.gap_families`) down the loop, one
count per link, so a null result says which link failed.

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


GAP_COLUMNS = {"run": pl.String, "gap_tools": pl.Int64, "explored": pl.Int64, "abstracted": pl.Int64,
               "admitted": pl.Int64, "trained_episodes": pl.Int64, "trained_successes": pl.Int64}  # fmt: skip


def gap_tools(families: Sequence[str]) -> set[str]:
    """The tools the coverage gap's families call."""
    from coevolve.envs.toolworld.tasks import GAP_TEMPLATES, family_calls

    by_name = {t.name: t for t in GAP_TEMPLATES}
    return set().union(set(), *(family_calls(by_name[name]) for name in families if name in by_name))


def gap_links(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run of a config with a coverage gap: its gap tools; the distinct gap tools an exploration called
    (`explored`, a call that ran), and the `ok` candidates (`abstracted`) and admitted tasks (`admitted`,
    the last dataset version's) whose solution calls one; the rollout episodes of those admitted tasks
    (`trained_episodes`) and how many of them succeeded (`trained_successes`)."""
    from coevolve.config import load_config
    from coevolve.storage.layout import RunLayout

    tools = {run: gap_tools(load_config(RunLayout(root, run).config_path).gap_families) for run in names}
    names = [run for run in names if tools[run]]
    explored = scalar_table(root, names, "SELECT DISTINCT run, tool FROM triples WHERE run IN (RUNS) AND ok",
                            {"run": pl.String, "tool": pl.String})  # fmt: skip
    candidates = scalar_table(root, names, "SELECT run, solution FROM candidates WHERE run IN (RUNS) AND status = 'ok'",
                              {"run": pl.String, "solution": pl.String})  # fmt: skip
    admitted = scalar_table(root, names, """
        WITH versions AS (SELECT run, max(dataset_version) AS last FROM datasets WHERE run IN (RUNS) GROUP BY run)
        SELECT DISTINCT d.run, d.task_id, t.solution FROM datasets d JOIN versions v USING (run)
        JOIN tasks t ON t.run = d.run AND t.task_id = d.task_id
        WHERE d.dataset_version = v.last AND d.added_round > 0""",
        {"run": pl.String, "task_id": pl.String, "solution": pl.String})  # fmt: skip
    rollouts = scalar_table(root, names, "SELECT run, task_id, success FROM trajectories WHERE run IN (RUNS) "
                            "AND source = 'rollout'", {"run": pl.String, "task_id": pl.String, "success": pl.Boolean})
    rows = []
    for run in names:
        gap = tools[run]
        mine = admitted.filter(pl.col("run") == run)
        gap_tasks = {row["task_id"] for row in mine.iter_rows(named=True) if _calls(gap, row["solution"])}
        episodes = rollouts.filter((pl.col("run") == run) & pl.col("task_id").is_in(sorted(gap_tasks)))
        rows.append({
            "run": run, "gap_tools": len(gap),
            "explored": len(gap & set(explored.filter(pl.col("run") == run)["tool"])),
            "abstracted": sum(_calls(gap, s) for s in candidates.filter(pl.col("run") == run)["solution"]),
            "admitted": len(gap_tasks), "trained_episodes": episodes.height,
            "trained_successes": int(episodes["success"].sum() or 0),
        })  # fmt: skip
    return pl.DataFrame(rows, schema=GAP_COLUMNS)


def _calls(tools: set[str], solution: str | None) -> bool:
    """Whether `solution` calls one of `tools`."""
    return bool(tools & set(_solution_tools(solution)))


def _solution_tools(solution: str | None) -> list[str]:
    """Tool names of a solution as `tasks` (calls per turn) or `candidates` (a flat list of calls) store it."""
    calls = json.loads(solution or "[]")
    flat = [c for turn in calls for c in turn] if calls and isinstance(calls[0], list) else calls
    return [call["name"] for call in flat if isinstance(call, dict) and "name" in call]
