"""Speed and agreement of `stages.signals.rules.extract_signals` against a plain-Python version of the rules.

    coevolve bench signals                                  # 100 rounds x 10,000 trajectories
    coevolve bench signals --rounds 20                      # smaller ledger

Builds a synthetic ledger: a pool of tasks, a random subset of them attempted each round (so some
tasks skip rounds) with K samples each; rewards in {0, 0.5, 1} from task-dependent success rates that
drift over the rounds; a few steps per trajectory over ~40 tool names drawn Zipf-like (so most tools
are rare), some steps without a tool (parse errors, answers), rows shuffled. Then times the signals of
the last round with the vectorised stage and with dicts-and-loops Python, checks that both mark the
same (kind, trajectory_id) rows, and prints wall times, the ratio and counts per kind. The median times
and the ratio go to `benchmarks/results/signals.jsonl`.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import pairwise

import numpy as np
import polars as pl

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.stages.signals.rules import extract_signals


def _names(prefix: str, numbers: np.ndarray, width: int) -> pl.Series:
    """'task_00042'-style names, vectorised."""
    digits = pl.Series(numbers).cast(pl.String).str.zfill(width)
    return pl.select(pl.concat_str(pl.lit(prefix), digits)).to_series()


def synthetic_ledger(
    *, rounds: int, tasks_per_round: int, task_pool: int, samples: int, steps: int, tools: int, seed: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    # which tasks each round attempts: the first `tasks_per_round` of a random permutation of the pool
    order = np.argsort(rng.random((rounds, task_pool)), axis=1)[:, :tasks_per_round]
    task = np.repeat(order.ravel(), samples)
    round_ = np.repeat(np.arange(rounds), tasks_per_round * samples)
    # success rate: a per-task level, a per-task drift over the rounds, per-(task, round) noise
    level, drift = rng.normal(0, 1.5, task_pool), rng.normal(0, 2.0, task_pool)
    noise = rng.normal(0, 0.7, (rounds, task_pool))[round_, task]
    p = 1 / (1 + np.exp(-(level[task] + drift[task] * round_ / rounds + noise)))
    u = rng.random(task.size)
    reward = np.where(u < p, 1.0, np.where(u < p + 0.1 * (1 - p), 0.5, 0.0))
    n = task.size
    trajectories = pl.DataFrame({
        "task_id": _names("task_", task, 5),
        "round": pl.Series(round_, dtype=pl.Int32),
        "sample": pl.Series(np.tile(np.arange(samples), n // samples), dtype=pl.Int32),
        "reward": reward,
        "trajectory_id": _names("traj_", np.arange(n), 9),
    })
    weights = 1 / np.arange(1, tools + 1) ** 1.2
    tool = rng.choice(tools, size=n * steps, p=weights / weights.sum())
    step = np.tile(np.arange(steps), n)
    no_call = rng.random(n * steps) < np.where(step == steps - 1, 0.5, 0.05)  # answers, parse errors
    steps_frame = pl.DataFrame({
        "trajectory_id": trajectories["trajectory_id"].gather(np.repeat(np.arange(n), steps)),
        "step": pl.Series(step, dtype=pl.Int32),
        "call_index": pl.Series(np.zeros(n * steps), dtype=pl.Int32),
        "tool": _names("tool_", tool, 2).set(pl.Series(no_call), None),
    }).sample(fraction=1.0, shuffle=True, seed=seed)
    return trajectories, steps_frame


def python_signals(
    trajectories: pl.DataFrame, steps: pl.DataFrame, *, round_: int, window: int, theta: float, pattern: str
) -> set[tuple[str, str]]:
    """The three rules with dicts and loops, for round `round_` only; returns {(kind, trajectory_id)}."""
    rewards = defaultdict(list)  # (task, round) -> rewards
    current = defaultdict(list)  # task -> [(trajectory_id, reward)] of round_
    round_of = {}
    for task, rnd, _sample, reward, tid in trajectories.iter_rows():
        if rnd > round_:
            continue
        rewards[(task, rnd)].append(reward)
        round_of[tid] = rnd
        if rnd == round_:
            current[task].append((tid, reward))
    attempted = defaultdict(list)
    for (task, rnd), rs in rewards.items():
        attempted[task].append((rnd, sum(rs) / len(rs)))
    marked = set()
    for task, rows in current.items():
        rs = [r for _, r in rows]
        score = sum(rs) / len(rs)
        history = sorted((x for x in attempted[task] if x[0] < round_), reverse=True)[:window]
        if score < 0.5 and any(s >= 0.5 for _, s in history):
            marked |= {("forgetting", tid) for tid, r in rows if r < 0.5}
        if any(r > 0.5 for r in rs) and any(r < 0.5 for r in rs):
            marked |= {("boundary", tid) for tid, _ in rows}
    calls = defaultdict(list)  # trajectory -> [(step, call_index, tool)] in the window
    for tid, tool, step, call_index in steps.select("trajectory_id", "tool", "step", "call_index").iter_rows():
        rnd = round_of.get(tid)
        if tool is not None and rnd is not None and rnd > round_ - window:
            calls[tid].append((step, call_index, tool))
    uses = {}
    for tid, cs in calls.items():
        tools = [t for _, _, t in sorted(cs)]
        uses[tid] = tools if pattern == "tool" else [f"{a}>{b}" for a, b in pairwise(tools)]
    counts = Counter(p for ps in uses.values() for p in ps)
    total = sum(counts.values())
    rare = {p for p, c in counts.items() if 0 < c / total < theta / 100}
    for tid, ps in uses.items():
        if round_of[tid] == round_ and rare.intersection(ps):
            marked.add(("rare", tid))
    return marked


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("signals", __doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--tasks-per-round", type=int, default=1250)
    parser.add_argument("--task-pool", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tools", type=int, default=40)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--theta", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    print(f"date {datetime.datetime.now().isoformat(timespec='seconds')}  machine {platform.machine()} "
          f"{platform.processor() or ''} cores {os.cpu_count()} (affinity {len(os.sched_getaffinity(0))})  "
          f"polars {pl.__version__} threads {pl.thread_pool_size()}")
    t0 = time.perf_counter()
    trajectories, steps = synthetic_ledger(
        rounds=args.rounds, tasks_per_round=args.tasks_per_round, task_pool=args.task_pool,
        samples=args.samples, steps=args.steps, tools=args.tools, seed=args.seed)
    last = args.rounds - 1
    print(f"ledger: {trajectories.height:,} trajectories, {steps.height:,} steps "
          f"({steps['tool'].null_count():,} without a tool), built in {time.perf_counter() - t0:.1f} s")

    figures = {"step rows": figure(steps.height, "")}
    for pattern in ("tool", "bigram"):
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            signals = extract_signals(trajectories, steps, round=last, window=args.window,
                                      rare_theta=args.theta, rare_pattern=pattern)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        expected = python_signals(trajectories, steps, round_=last, window=args.window, theta=args.theta,
                                  pattern=pattern)
        python_s = time.perf_counter() - t0
        got = set(signals.select("kind", "trajectory_id").iter_rows())
        assert got == expected, f"{pattern}: {len(got - expected)} extra, {len(expected - got)} missing rows"
        assert signals["signal_id"].n_unique() == signals.height
        by_kind = dict(sorted(signals["kind"].value_counts().iter_rows()))
        print(f"[rare_pattern={pattern}] round {last}: extract_signals first {times[0]:.2f} s, "
              f"median {sorted(times)[len(times) // 2]:.2f} s of {len(times)}; python {python_s:.1f} s; "
              f"ratio {python_s / sorted(times)[len(times) // 2]:.0f}x; same {len(got):,} (kind, trajectory) rows; "
              f"by kind {by_kind}")
        median = sorted(times)[len(times) // 2]
        figures |= {f"extract_signals, {pattern} pattern": figure(median, "s"),
                    f"plain Python, {pattern} pattern": figure(python_s, "s"),
                    f"ratio, {pattern} pattern": figure(python_s / median, "x")}  # fmt: skip
    record_result("signals", figures, command=command_line("signals", argv), note=f"polars {pl.__version__}")


if __name__ == "__main__":
    main()
