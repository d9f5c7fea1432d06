"""Human-readable output for the CLI: query results as a table / CSV / JSON, and the runs overview."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv


def print_table(table: pa.Table, fmt: str = "table", *, max_rows: int = 200, max_width: int = 60) -> None:
    if fmt == "csv":
        pacsv.write_csv(table, sys.stdout.buffer)
        return
    if fmt == "json":
        for row in table.to_pylist():
            print(json.dumps(row, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    view = Table(show_edge=False, header_style="bold")
    for name in table.column_names:
        view.add_column(name, overflow="ellipsis", max_width=max_width)
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*(_cell(v) for v in row.values()))
    console = Console()
    console.print(view)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows (use --format csv for all)")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


RUNS_SQL = """
WITH rolls AS (
    SELECT run, max(round) + 1 AS rounds,
           avg(success::INT) FILTER (WHERE round = (SELECT max(round) FROM trajectories t2
                                                    WHERE t2.run = trajectories.run AND source = 'rollout'))
               AS last_train_success
    FROM trajectories WHERE source = 'rollout' GROUP BY run
), sizes AS (
    SELECT run, arg_max(n, dataset_version) AS dataset_size
    FROM (SELECT run, dataset_version, count(*) AS n FROM datasets GROUP BY ALL) GROUP BY run
), evals_last AS (
    SELECT run, arg_max(success, round) AS last_eval_success, max(round) AS eval_round
    FROM (SELECT run, round, avg(success::INT) AS success FROM evals WHERE stage = 'evaluate' GROUP BY ALL)
    GROUP BY run
)
SELECT rolls.run, rounds, dataset_size, last_train_success, last_eval_success, eval_round
FROM rolls LEFT JOIN sizes USING (run) LEFT JOIN evals_last USING (run) ORDER BY rolls.run
"""


def print_runs(root: Path) -> None:
    from storage.catalog import present_artifacts, query

    if not {"trajectories", "datasets", "evals"} <= set(present_artifacts(root)):
        print(f"no completed runs under {root}")
        return
    print_table(query(root, RUNS_SQL))
