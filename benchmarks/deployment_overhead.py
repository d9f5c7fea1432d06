"""What running through the deployment costs: `prefect deployment run coevolve/round` vs `coevolve run`.

    coevolve bench deployment-overhead [--config configs/test-tiny.yaml] [--repeats 2]

Starts a Prefect server on a free loopback port (analytics off) and `coevolve serve`, then, against
that same server, for fresh runs of the same config (one round each):

    cli          `coevolve run CONFIG --run cli-N --rounds 1` (a new process: imports, model load, flow)
    deployment   `prefect deployment run coevolve/round -p config=CONFIG -p run=dep-N -p rounds=1 --watch`
                 (the served process runs the flow; the CLI polls until the run is final)
    rerun        the same `coevolve run` again: every stage cached (the "re-run a completed round" case)

Each is repeated `--repeats` times; the table shows wall seconds (median) and the stage seconds inside
the flow (sum of the round's manifests), so the orchestration overhead is wall - stages; the medians go
to `benchmarks/results/deployment-overhead.jsonl`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.processes import free_port

BIN = Path(sys.executable).parent


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as handle:
        return subprocess.Popen(
            args, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def wait_for(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {seconds} s")


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def stage_seconds(root: Path, run: str) -> float:
    return sum(
        json.loads(p.read_text())["seconds"]
        for p in (root / f"run={run}").glob("round=*/stage=*/_manifest.json")
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("deployment-overhead", __doc__)
    parser.add_argument("--config", default="configs/test-tiny.yaml")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="coevolve-deploy-"))
    root, port = work / "runs", free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_HOME": str(work / "prefect"), "COEVOLVE_HOME": str(root),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_RUNNER_POLL_FREQUENCY": "1",
           "PREFECT_LOGGING_LEVEL": "WARNING"}  # fmt: skip
    server = start([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                   work / "server.log", env)  # fmt: skip
    serve = None
    try:
        wait_for(f"{api}/health", 180)
        serve = start([str(BIN / "coevolve"), "serve"], work / "serve.log", env)
        wait_for(f"{api}/deployments/name/coevolve/round", 180)
        rows: dict[str, list[tuple[float, float]]] = {"cli": [], "deployment": [], "rerun": []}
        for i in range(args.repeats):
            cli = [str(BIN / "coevolve"), "run", args.config, "--run", f"cli-{i}", "--rounds", "1"]
            rows["cli"].append((timed(cli, env), stage_seconds(root, f"cli-{i}")))
            rows["rerun"].append((timed(cli, env), 0.0))
            deploy = [str(BIN / "prefect"), "deployment", "run", "coevolve/round", "--watch", "-p",
                      f"config={Path(args.config).resolve()}", "-p", f"run=dep-{i}", "-p", "rounds=1"]  # fmt: skip
            rows["deployment"].append((timed(deploy, env), stage_seconds(root, f"dep-{i}")))
            print(f"repeat {i}: " + ", ".join(f"{k} {v[-1][0]:.1f} s" for k, v in rows.items()), flush=True)
        print(f"\n{args.config}, 1 round, {args.repeats} repeats (median)")
        print(f"{'path':<11} {'wall s':>7} {'stages s':>9} {'wall - stages':>14}")
        figures = {}
        for name, values in rows.items():
            wall, stages = statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)
            print(f"{name:<11} {wall:>7.1f} {stages:>9.1f} {wall - stages:>14.1f}")
            figures |= {f"{name} wall": figure(wall, "s"), f"{name} wall - stages": figure(wall - stages, "s")}
        record_result("deployment-overhead", figures, command=command_line("deployment-overhead", argv))
    finally:
        if serve is not None:
            stop(serve)
        stop(server)


if __name__ == "__main__":
    main()
