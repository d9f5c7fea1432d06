"""The web view (`coevolve ui`) on a large run: how long each page takes over a 10M-row `steps` view.

    coevolve bench ui-pages --steps 10000000 --rounds 100

Writes a synthetic run through `RunStore` (the real schemas, Parquet writer, layout and manifests):
every round has a rollout (`steps / rounds` steps, a quarter as many trajectories, a few samples), an
update, an evaluation, signals, explorations, triples, candidates, verifications and a merge that admits
synthesized tasks with full lineage. Then it requests every page through the app in process (Starlette's
test client: routing, SQL, templates; no network) three times and reports the first (cold) and best time.
The first request of all (the runs page) also builds the catalog connection: it reads every Parquet
footer once, and again in the background every 30 s.
`write_run` also serves the tests of `coevolve.ui` at small size.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from coevolve.benchmarks.duckdb_scale import steps_table
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.store import RunStore

RUN = "scale"  # duckdb_scale.steps_table writes this run name into its rows
SEED_TASKS = 500
SAMPLES_PER_ROUND = 64


def filled(artifact: str, n: int, values: dict[str, Any]) -> pa.Table:
    """`n` rows of `artifact`: the given columns, every other one a neutral value of its type."""
    columns = {}
    for field in ARTIFACTS[artifact]:
        if field.name in values:
            value = values[field.name]
            columns[field.name] = pa.array(value if isinstance(value, list | np.ndarray) else [value] * n, field.type)
        elif pa.types.is_list(field.type):
            columns[field.name] = pa.array([[]] * n, field.type)
        elif pa.types.is_string(field.type):
            columns[field.name] = pa.array(["{}"] * n if field.nullable is False else [None] * n, field.type)
        else:
            columns[field.name] = pa.array(np.zeros(n), pa.float64()).cast(field.type)
    return pa.Table.from_pydict(columns, schema=ARTIFACTS[artifact])


def _messages(task: str, reply: str) -> str:
    return json.dumps([{"role": "user", "content": f"What is the balance of {task}?"},
                       {"role": "assistant", "content": reply}, {"role": "tool", "content": '{"balance": 1520.5}'},
                       {"role": "assistant", "content": "Done. 1520.5"}])  # fmt: skip


def _trajectories(r: int, n: int, rng: np.random.Generator, reply: str) -> pa.Table:
    ids = [f"r{r}-t{i}" for i in range(n)]
    tasks = [f"task-{i % SEED_TASKS}" if i >= 8 or r == 0 else f"syn-{r - 1}-{i % 4}" for i in range(n)]
    return filled("trajectories", n, {
        "run": RUN, "round": r, "trajectory_id": ids, "source": "rollout", "task_id": tasks,
        "group_id": [f"g{r}-{i // 4}" for i in range(n)], "sample": [i % 4 for i in range(n)],
        "policy_version": f"r{r - 1}-x" if r else "base-x", "reward": rng.random(n), "success": rng.random(n) < 0.3 + r / 400,
        "finish": "done", "messages": [_messages(t, reply) for t in tasks[:1]] * n,
        "eval_details": '{"checks_passed": 1, "checks_total": 2}', "num_steps": 2, "num_tool_calls": 1,
    })  # fmt: skip


def _samples(r: int, n: int) -> pa.Table:
    mask = [0] * 500 + [1] * 40 + [0] * 20 + [1] * 40
    return filled("samples", n, {
        "run": RUN, "round": r, "sample_id": [f"r{r}-t{i}" for i in range(n)], "trajectory_id": [f"r{r}-t{i}" for i in range(n)],
        "input_ids": [list(range(len(mask)))] * n, "loss_mask": [mask] * n, "logprobs": [[0.0] * len(mask)] * n,
        "num_tokens": len(mask), "num_policy_tokens": sum(mask), "policy_version": "base-x",
    })  # fmt: skip


def _evolution(r: int, reply: str) -> dict[str, tuple[str, pa.Table]]:
    """Round r's evolution: 40 signals, 4 explorations, 16 triples, 4 candidates, 4 verdicts, 4 tasks."""
    k = range(4)
    lineage = [json.dumps({"signal_id": f"s{r}-{j}", "signal_kind": "boundary", "exploration_id": f"e{r}-{j}",
                           "group_id": f"g{r}-{j}", "candidate_id": f"c{r}-{j}", "verification_id": f"v{r}-{j}",
                           "trajectory_id": f"r{r}-t{j}"}) for j in k]  # fmt: skip
    return {
        "signals": ("signals", filled("signals", 40, {"run": RUN, "round": r, "signal_id": [f"s{r}-{j}" for j in range(40)],
                    "kind": ["boundary", "forgetting", "rare", "boundary"] * 10, "task_id": [f"task-{j}" for j in range(40)],
                    "trajectory_id": [f"r{r}-t{j}" for j in range(40)], "trajectory_round": r, "evidence": '{"mean": 0.5}'})),
        "explorations": ("explore", filled("explorations", 4, {"run": RUN, "round": r, "exploration_id": [f"e{r}-{j}" for j in k],
                         "signal_id": [f"s{r}-{j}" for j in k], "kind": "boundary", "status": "ok", "reflection": reply,
                         "trajectory_ids": '["x"]', "task_id": "task-0"})),
        "triples": ("triples", filled("triples", 16, {"run": RUN, "round": r, "group_id": [f"g{r}-{j // 4}" for j in range(16)],
                    "exploration_id": [f"e{r}-{j // 4}" for j in range(16)], "tool": "get_balance", "observation": reply})),
        "candidates": ("abstract", filled("candidates", 4, {"run": RUN, "round": r, "candidate_id": [f"c{r}-{j}" for j in k],
                       "group_id": [f"g{r}-{j}" for j in k], "status": "ok", "query": reply, "solution": "[]"})),
        "verifications": ("verify", filled("verifications", 4, {"run": RUN, "round": r, "verification_id": [f"v{r}-{j}" for j in k],
                          "candidate_id": [f"c{r}-{j}" for j in k], "outcome": ["accept", "accept", "retain", "discard"],
                          "reason": reply, "task_id": [f"syn-{r}-{j}" for j in k]})),
        "tasks": ("merge", filled("tasks", 4, {"run": RUN, "round": r, "task_id": [f"syn-{r}-{j}" for j in k], "source": "synthesized",
                  "split": "synthesized", "family": "synth:get_balance", "turns": json.dumps([reply]), "lineage": lineage})),
    }  # fmt: skip


def _write_stage(store: RunStore, r: int, stage: str, tables: dict[str, pa.Table]) -> None:
    refs = {name: store.write(r, stage, name, table) for name, table in tables.items()}
    store.write_manifest(Manifest(stage, RUN, r, f"key-{r}-{stage}", 1, refs, {"rows": sum(t.num_rows for t in tables.values())},
                                  started_at=time.time(), seconds=0.1))  # fmt: skip


def write_run(root: Path, steps: int, rounds: int, reply: str = '<tool_call>{"name": "get_balance"}</tool_call>') -> None:
    """A synthetic run `scale` under `root`: `steps` steps over `rounds` rounds; `reply` is the text of
    every model reply, teacher reflection, tool result and synthesized request (tests put markup in it)."""
    store, rng = RunStore(RunLayout(root, RUN)), np.random.default_rng(0)
    seeds = [f"task-{i}" for i in range(SEED_TASKS)]
    _write_stage(store, 0, "bootstrap", {
        "tasks": filled("tasks", SEED_TASKS, {"run": RUN, "round": 0, "task_id": seeds, "source": "seed", "turns": '["q"]'}),
        "datasets": filled("datasets", SEED_TASKS, {"run": RUN, "round": 0, "task_id": seeds, "weight": 1.0})})  # fmt: skip
    per_round = steps // rounds
    for r in range(rounds):
        episodes = per_round // 4
        _write_stage(store, r, "rollout", {"steps": steps_table(r, per_round, rng),
                                           "trajectories": _trajectories(r, episodes, rng, reply),
                                           "samples": _samples(r, min(SAMPLES_PER_ROUND, episodes))})  # fmt: skip
        by_stage: dict[str, dict[str, pa.Table]] = {}
        for name, (stage, table) in _evolution(r, reply).items():
            by_stage.setdefault(stage, {})[name] = table
        by_stage["merge"]["datasets"] = filled("datasets", SEED_TASKS + 4 * (r + 1), {
            "run": RUN, "round": r, "dataset_version": r + 1, "weight": 1.0,
            "task_id": seeds + [f"syn-{q}-{j}" for q in range(r + 1) for j in range(4)]})  # fmt: skip
        by_stage["grpo_update"] = {"updates": filled("updates", 1, {"run": RUN, "round": r, "loss": float(rng.normal()),
                                                                   "kl": 0.01 * r})}  # fmt: skip
        by_stage["evaluate"] = {"evals": filled("evals", 64, {"run": RUN, "round": r, "success": rng.random(64) < 0.2 + r / 300})}
        for stage, tables in by_stage.items():
            _write_stage(store, r, stage, tables)


def pages(rounds: int) -> dict[str, str]:
    """Every page of the view on the synthetic run, by name."""
    middle = rounds // 2
    return {
        "runs": "/", "run": f"/runs/{RUN}", "round": f"/runs/{RUN}/rounds/{middle}",
        "round, page 40": f"/runs/{RUN}/rounds/{middle}?page=40&source=rollout",
        "trajectory": f"/runs/{RUN}/trajectories/r{middle}-t7", "signals": f"/runs/{RUN}/signals?kind=rare",
        "verifications": f"/runs/{RUN}/verifications", "tasks": f"/runs/{RUN}/tasks",
        "task lineage": f"/runs/{RUN}/tasks/syn-{middle}-1", "seed task": f"/runs/{RUN}/tasks/task-7",
    }  # fmt: skip


def time_pages(root: Path, rounds: int) -> dict[str, list[float]]:
    from starlette.testclient import TestClient

    from coevolve.ui.app import create_app

    client, times = TestClient(create_app(root), base_url="http://127.0.0.1"), {}
    t0 = time.perf_counter()
    client.get("/")  # also builds the connection: every Parquet footer read once
    times["first request (catalog scan)"] = [time.perf_counter() - t0]
    for name, url in pages(rounds).items():
        times[name] = []
        for _ in range(3):
            t0 = time.perf_counter()
            response = client.get(url)
            times[name].append(time.perf_counter() - t0)
            assert response.status_code == 200, (url, response.text[:2000])
    return times


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("ui-pages", __doc__)
    parser.add_argument("--steps", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--root", type=Path, help="default: a temporary directory")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="coevolve-ui-"))
    started = time.perf_counter()
    write_run(root, args.steps, args.rounds)
    size = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 2**20
    print(f"wrote {args.steps:,} steps over {args.rounds} rounds ({size:.0f} MiB) in "
          f"{time.perf_counter() - started:.0f} s under {root}\n\n{'page':<30} {'cold s':>7} {'best s':>7}")  # fmt: skip
    figures = {"steps rows": figure(args.steps, ""), "Parquet size": figure(size, "MiB")}
    for name, times in time_pages(root, args.rounds).items():
        print(f"{name:<30} {times[0]:>7.3f} {min(times):>7.3f}")
        figures |= {f"{name}, cold": figure(times[0], "s")} | ({f"{name}, best": figure(min(times), "s")} if len(times) > 1 else {})
    record_result("ui-pages", figures, command=command_line("ui-pages", argv),
                  note="In-process requests (no network). Target: every page within about a second.")  # fmt: skip


if __name__ == "__main__":
    main()
