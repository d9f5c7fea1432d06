"""Ray environment actors against a local process pool: overhead per episode on BFCL reference replays.

    coevolve bench ray-envs                                 # 200 multi_turn_base replays, 2 workers
    coevolve bench ray-envs --address 127.0.0.1:6379 --workers 8

Replays every reference solution (reset, the reference calls turn by turn, evaluate; `envs.replay`) four
ways and prints the wall time per episode of each:

- in process, one episode after the other (what `runtime.ray_address` unset does);
- a local `ProcessPoolExecutor` of `--workers` processes, one task per job (the baseline the issue names);
- Ray actors of `envs.ray_workers.RayEnvPool`, one episode after the other (the per-call round trip);
- Ray actors with `--workers` episodes in flight (threads waiting on actors, as the agent loop's
  `submit_step` does).

Without `--address` it starts a local Ray head on loopback (no dashboard) and stops it afterwards.
All four must give the same verdicts; the script says so. Wall time per episode of each way goes to
`benchmarks/results/ray-envs.jsonl`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from coevolve import envs
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.envs.base import Task
from coevolve.envs.bfcl import data
from coevolve.envs.replay import replay_reference
from coevolve.executors.ray_envs import RayEnvPool


def _replay_in_process(category: str, task: Task) -> bool:
    return replay_reference(envs.make("bfcl", category=category), task).success


def _replay_remote(pool: RayEnvPool, task: Task) -> bool:
    env = pool.make()
    try:
        return replay_reference(env, task).success
    finally:
        env.close()


def _timed(label: str, run, episodes: int, times: dict[str, float]) -> list[bool]:
    """Run `run`, print its time and verdicts, and keep its milliseconds per episode in `times[label]`."""
    started = time.perf_counter()
    verdicts = list(run())
    seconds = time.perf_counter() - started
    print(
        f"{label:<40} {seconds:7.2f} s  {1000 * seconds / episodes:7.2f} ms/episode  "
        f"{sum(verdicts)}/{episodes} succeed",
        flush=True,
    )
    times[label] = 1000 * seconds / episodes
    return verdicts


def _start_head() -> tuple[str, Path]:
    port = 20000 + os.getpid() % 10000
    temp = Path(tempfile.mkdtemp(prefix="coevolve-ray-"))
    cli = Path(sys.executable).with_name("ray")
    subprocess.run(
        [
            str(cli),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--include-dashboard=false",
            "--object-store-memory=200000000",
            f"--temp-dir={temp}",
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    return f"127.0.0.1:{port}", temp


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("ray-envs", __doc__)
    parser.add_argument("--category", default="base")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--address", help="an existing Ray cluster (default: start a local head)")
    args = parser.parse_args(argv)
    category = data.category_name(args.category)
    tasks = envs.make("bfcl", category=category).tasks("all")[: args.tasks]
    n, w = len(tasks), args.workers
    print(
        f"bfcl-eval {data.bfcl_version()} | {category} | {n} reference replays | {w} workers | "
        f"{os.cpu_count()} cores",
        flush=True,
    )

    times: dict[str, float] = {}
    baseline = _timed("in process, sequential", lambda: (_replay_in_process(category, t) for t in tasks), n, times)
    with ProcessPoolExecutor(w) as processes:
        list(processes.map(_replay_in_process, [category] * w, tasks[:w]))  # start-up not timed
        local_pool = _timed(
            f"process pool x{w}", lambda: processes.map(_replay_in_process, [category] * n, tasks), n, times
        )

    address, temp = (args.address, None) if args.address else _start_head()
    try:
        pool = RayEnvPool(address, "bfcl", {"category": category})
        warm = [pool.make() for _ in range(w)]  # actor start-up not timed
        for env in warm:
            env.close()
        ray_seq = _timed("ray actors, sequential", lambda: (_replay_remote(pool, t) for t in tasks), n, times)
        with ThreadPoolExecutor(w) as threads:
            ray_par = _timed(
                f"ray actors x{w} in flight", lambda: threads.map(lambda t: _replay_remote(pool, t), tasks), n,
                times,
            )
        print(f"ray actors started: {pool.size}")
        pool.shutdown()
    finally:
        if temp is not None:
            import ray

            ray.shutdown()
            subprocess.run(
                [str(Path(sys.executable).with_name("ray")), "stop", "--force"], capture_output=True
            )
    same = baseline == local_pool == ray_seq == ray_par
    print(f"verdicts identical across the four: {same}")
    figures = {label: figure(ms, "ms/episode") for label, ms in times.items()}
    record_result("ray-envs", figures | {"verdicts identical": figure(int(same), "")},
                  command=command_line("ray-envs", argv), variant=category)  # fmt: skip


if __name__ == "__main__":
    main()
