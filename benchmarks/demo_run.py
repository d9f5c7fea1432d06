"""What `make demo` costs and what its data evolution does: `coevolve run configs/demo.yaml` in a fresh
storage root, timed, then the evolution counts from the catalog.

    coevolve bench demo                          # the model cache as it is (warm starts built once)
    coevolve bench demo --fresh-cache            # an empty model cache: conversion and warm starts included

Figures: the run's wall time and peak resident memory (its largest process); the seconds the warm starts took when they were built (from their
`warm_start.json`; with `--fresh-cache` they are part of the wall time), and where a start was merged
from its shipped adapter (`configs/warm-starts/`), also the seconds of that merge; signals per kind, explorations,
candidates, verification outcomes, synthesized tasks admitted, round 1's rollout episodes on synthesized
tasks and how many succeeded; held-out success before and after (the baseline and the last evaluation).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

SYNTHESIZED = "task_id IN (SELECT task_id FROM tasks WHERE source = 'synthesized')"
COUNTS = {
    "signals": "SELECT count(*) AS n FROM signals",
    "explorations": "SELECT count(*) AS n FROM explorations",
    "candidates": "SELECT count(*) AS n FROM candidates",
    "verified: accept": "SELECT count(*) AS n FROM verifications WHERE outcome = 'accept'",
    "verified: retain": "SELECT count(*) AS n FROM verifications WHERE outcome = 'retain'",
    "verified: discard": "SELECT count(*) AS n FROM verifications WHERE outcome = 'discard'",
    "synthesized tasks admitted": "SELECT count(DISTINCT task_id) AS n FROM tasks WHERE source = 'synthesized'",
    "round-1 rollouts on synthesized tasks": (
        f"SELECT count(*) AS n FROM trajectories WHERE source = 'rollout' AND round = 1 AND {SYNTHESIZED}"),
    "round-1 rollouts on synthesized tasks, solved": (
        f"SELECT count(*) AS n FROM trajectories WHERE source = 'rollout' AND round = 1 AND {SYNTHESIZED} "
        "AND success"),
}


def evolution_counts(root: Path) -> dict[str, int]:
    from coevolve.storage.catalog import query

    out = {name: int(query(root, sql).to_pylist()[0]["n"]) for name, sql in COUNTS.items()}
    for row in query(root, "SELECT kind, count(*) AS n FROM signals GROUP BY kind").to_pylist():
        out[f"signals: {row['kind']}"] = int(row["n"])
    return out


def held_out_success(root: Path) -> dict[str, float]:
    from coevolve.storage.catalog import query

    rows = query(root, "SELECT stage, round, avg(success::INT) AS s FROM evals GROUP BY ALL ORDER BY round").to_pylist()
    baseline = [r["s"] for r in rows if r["stage"] == "baseline"]
    final = [r["s"] for r in rows if r["stage"] == "evaluate"]
    return {"test success, baseline": 100 * baseline[0], "test success, after the last round": 100 * final[-1]}


def warm_start_seconds(config: str) -> dict[str, float]:
    from coevolve.config import load_config
    from coevolve.llm.models import resolve_model
    from coevolve.stages.warm_start.build import RECORD, with_warm_starts

    named = with_warm_starts(load_config(config))
    out = {}
    for label, name in (("policy", named.model.name), ("teacher", getattr(named.teacher, "model", ""))):
        if name.startswith("warm-start/"):
            record = json.loads((resolve_model(name) / RECORD).read_text())
            if "merge_seconds" in record:  # merged from the shipped adapter on this machine
                out[f"warm start merged from the shipped adapter, {label}"] = record["merge_seconds"]
            out[f"warm start build, {label}"] = record["seconds"]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("demo", __doc__)
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--fresh-cache", action="store_true", help="Start from an empty model cache.")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="coevolve-demo-"))
    env = {**os.environ, "COEVOLVE_HOME": str(work / "runs"), "PREFECT_HOME": str(work / "prefect")}
    env.pop("PREFECT_API_URL", None)
    if args.fresh_cache:
        env["COEVOLVE_CACHE"] = os.environ["COEVOLVE_CACHE"] = str(work / "cache")
    load = os.getloadavg()[0]
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("coevolve")), "run", args.config], env=env, check=True)
    wall = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB on Linux
    counts, success = evolution_counts(work / "runs"), held_out_success(work / "runs")
    figures = {"wall": figure(wall, "s"), "peak RSS": figure(peak_gb, "GiB"), **{k: figure(v, "s") for k, v in warm_start_seconds(args.config).items()},
               **{k: figure(v, "") for k, v in counts.items()}, **{k: figure(v, "%") for k, v in success.items()}}
    for name, value in figures.items():
        print(f"{name:<48} {value['value']:>10} {value['unit']}")
    record_result("demo", figures, command=command_line("demo", argv), variant="fresh cache" if args.fresh_cache else "",
                  note=f"{args.config} in a fresh storage root; load average {load:.1f} at the start, "
                       f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
