"""DuckDB inspection at scale: the documented queries on a storage root with a 10M-row `steps` view.

    coevolve bench duckdb-scale --rows 10000000 --rounds 100

Writes a synthetic run through `RunStore` (the real schemas, Parquet writer and layout): `rounds` rounds,
each with `rows / rounds` steps and the matching trajectories (4 steps each), then times through
`storage.catalog.query` (a fresh in-memory connection with every view, as `coevolve sql` does):

    tool use       the docs/sql.md query over `steps` (group by tool over every row)
    per round      steps and tool-error rate per round and source
    one episode    every step of one trajectory id (what `coevolve show trajectory` needs)
    join           success rate by the tool of the first call, steps joined with trajectories

Each query runs 3 times; the table shows the best and the first (cold) time, and both go to
`benchmarks/results/duckdb-scale.jsonl`.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.storage.catalog import build_catalog, query
from coevolve.storage.layout import RunLayout
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.store import RunStore

TOOLS = [f"tool_{i}" for i in range(34)]

QUERIES = {
    "tool use": """
        SELECT tool, count(*) AS calls, avg(ok::INT) AS ok_rate FROM steps
        WHERE kind = 'call' AND source = 'rollout' GROUP BY ALL ORDER BY calls DESC""",
    "per round": """
        SELECT round, source, count(*) AS steps, avg((NOT ok)::INT) AS error_rate FROM steps
        GROUP BY ALL ORDER BY round, source""",
    "one episode": "SELECT * FROM steps WHERE trajectory_id = '{probe}' ORDER BY step, call_index",
    "join": """
        SELECT s.tool, avg(t.success::INT) AS success, count(*) AS episodes
        FROM steps s JOIN trajectories t USING (run, round, trajectory_id)
        WHERE s.step = 0 AND s.call_index = 0 GROUP BY ALL ORDER BY episodes DESC""",
}


def steps_table(round_: int, n: int, rng: np.random.Generator) -> pa.Table:
    episodes = n // 4
    ids = np.array([f"r{round_}-t{i}" for i in range(episodes)])
    columns = {
        "run": np.full(n, "scale"),
        "round": np.full(n, round_, dtype=np.int32),
        "trajectory_id": np.repeat(ids, 4),
        "source": np.where(rng.random(n) < 0.8, "rollout", "eval:test"),
        "task_id": np.repeat(np.array([f"task-{i % 500}" for i in range(episodes)]), 4),
        "step": np.tile(np.array([0, 1, 2, 3], dtype=np.int32), episodes),
        "turn": np.zeros(n, dtype=np.int32),
        "call_index": np.zeros(n, dtype=np.int32),
        "kind": np.where(rng.random(n) < 0.9, "call", "answer"),
        "tool": np.array(TOOLS)[rng.integers(0, len(TOOLS), n)],
        "arguments": np.full(n, '{"account_id": "acc-1"}'),
        "ok": rng.random(n) < 0.7,
        "observation": np.full(n, '{"balance": 1520.5}'),
        "reply": np.full(n, '<tool_call>{"name": "get_balance"}</tool_call>'),
    }
    return pa.Table.from_pydict({k: pa.array(v) for k, v in columns.items()}, schema=ARTIFACTS["steps"])


def trajectories_table(round_: int, episodes: int, rng: np.random.Generator) -> pa.Table:
    schema = ARTIFACTS["trajectories"]
    values = {
        "run": ["scale"] * episodes,
        "round": [round_] * episodes,
        "trajectory_id": [f"r{round_}-t{i}" for i in range(episodes)],
        "reward": rng.random(episodes),
        "success": rng.random(episodes) < 0.3,
    }
    columns = {}
    for field in schema:
        if field.name in values:
            columns[field.name] = pa.array(values[field.name], type=field.type)
        elif pa.types.is_string(field.type):
            columns[field.name] = pa.array(["x"] * episodes, type=field.type)
        else:
            columns[field.name] = pa.array(np.zeros(episodes), type=field.type)
    return pa.Table.from_pydict(columns, schema=schema)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("duckdb-scale", __doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--root", type=Path, help="default: a temporary directory")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="coevolve-duckdb-"))
    store, rng = RunStore(RunLayout(root, "scale")), np.random.default_rng(0)
    started = time.perf_counter()
    per_round = args.rows // args.rounds
    for r in range(args.rounds):
        store.write(r, "rollout", "steps", steps_table(r, per_round, rng))
        store.write(r, "rollout", "trajectories", trajectories_table(r, per_round // 4, rng))
    build_catalog(root)
    size = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 2**20
    print(f"wrote {per_round * args.rounds:,} steps in {args.rounds} files ({size:.0f} MiB) "
          f"in {time.perf_counter() - started:.0f} s under {root}")  # fmt: skip
    rows = query(root, "SELECT count(*) AS n FROM steps").column("n")[0].as_py()
    print(f"steps view: {rows:,} rows\n\n{'query':<12} {'cold s':>7} {'best s':>7} {'result rows':>12}")
    figures = {"steps rows": figure(rows, ""), "Parquet size": figure(size, "MiB")}
    for name, sql in QUERIES.items():
        sql = sql.format(probe=f"r{args.rounds // 2}-t7")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            table = query(root, sql)
            times.append(time.perf_counter() - t0)
        print(f"{name:<12} {times[0]:>7.2f} {min(times):>7.2f} {table.num_rows:>12,}")
        figures |= {f"{name}, cold": figure(times[0], "s"), f"{name}, best": figure(min(times), "s")}
    record_result("duckdb-scale", figures, command=command_line("duckdb-scale", argv))


if __name__ == "__main__":
    main()
