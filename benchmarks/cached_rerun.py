"""A finished run re-run from a fresh process: `coevolve run` against the same re-run through the flow.

`coevolve run CONFIG` on a run whose every stage is cached checks the stage manifests before anything
else and prints the rounds without starting Prefect or loading a model. The baseline is the same re-run
through the `coevolve` flow on a temporary Prefect server (what every re-run cost before), in a fresh
process too. Both are timed wall-clock, median of `--repeats`, with the load average recorded.

    coevolve bench cached-rerun [--config configs/test-tiny.yaml] [--rounds 2] [--repeats 5]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

BIN = Path(sys.executable).parent
THROUGH_THE_FLOW = """
import sys
from coevolve.flows.coevolve import coevolve
from coevolve.flows.prefect_api import prefect_api
with prefect_api():
    coevolve(sys.argv[1], run="rerun", rounds=int(sys.argv[2]))
"""


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("cached-rerun", __doc__)
    parser.add_argument("--config", default="configs/test-tiny.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="coevolve-rerun-"))
    env = {**os.environ, "COEVOLVE_HOME": str(work / "runs"), "PREFECT_HOME": str(work / "prefect")}
    env.pop("PREFECT_API_URL", None)
    cli = [str(BIN / "coevolve"), "run", args.config, "--run", "rerun", "--rounds", str(args.rounds)]
    first = timed(cli, env)
    print(f"built the run in {first:.0f} s", flush=True)
    flow = [sys.executable, "-c", THROUGH_THE_FLOW, args.config, str(args.rounds)]
    load = os.getloadavg()[0]
    fast = statistics.median(timed(cli, env) for _ in range(args.repeats))
    slow = statistics.median(timed(flow, env) for _ in range(args.repeats))
    print(f"cached re-run: coevolve run {fast:.2f} s, through the flow {slow:.2f} s ({slow / fast:.1f}x)")
    record_result("cached-rerun", {"coevolve run": figure(fast, "s"), "through the flow": figure(slow, "s"),
                                   "flow / run": figure(slow / fast, "x")},
                  command=command_line("cached-rerun", argv), variant=Path(args.config).stem,
                  note=f"{args.rounds} rounds, median of {args.repeats}, fresh process each; load average "
                       f"{load:.1f} at the start")  # fmt: skip
