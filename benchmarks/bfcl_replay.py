"""Replay every BFCL ground truth through our environment and time it against bfcl-eval's own checker.

    coevolve bench bfcl-replay                              # multi_turn_base, all 200 tasks
    coevolve bench bfcl-replay --category long_context

Prints, each line tagged with the bfcl-eval version: our verdicts and wall time for the whole loop
(`replay_reference` on a fresh `envs.make("bfcl")` per task: reset, steps, evaluate), the official
`multi_turn_checker` verdicts and time on the same decoded calls next to our checker's alone (and how
many verdicts agree), and the median / p99 latency of one `env.step` for bfcl and for the built-in tool
world; the same figures go to `benchmarks/results/bfcl-replay.jsonl`, one variant per category. Target:
ours <= 3 s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from coevolve import envs
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.envs.base import Action, Environment, StepResult, Task
from coevolve.envs.bfcl import data
from coevolve.envs.bfcl.backends import Scenario
from coevolve.envs.bfcl.checker import check_turns
from coevolve.envs.bfcl.official import official_check
from coevolve.envs.replay import replay_reference


class TimedEnv:
    """Delegates to an environment and records the wall time of every `step`."""

    def __init__(self, env: Environment, latencies: list[float]) -> None:
        self._env, self._latencies = env, latencies
        self.name = env.name

    def step(self, action: Action) -> StepResult:
        started = time.perf_counter()
        result = self._env.step(action)
        self._latencies.append(time.perf_counter() - started)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def replay_ours(category: str, tasks: list[Task]) -> tuple[list[bool], float]:
    started = time.perf_counter()
    verdicts = [replay_reference(envs.make("bfcl", category=category), task).success for task in tasks]
    return verdicts, time.perf_counter() - started


def check_ours(category: str, tasks: list[Task]) -> tuple[list[bool], float]:
    """Our checker alone on the same decoded calls (what the official checker's time compares with)."""
    env = envs.make("bfcl", category=category)
    jobs = [
        (
            Scenario.of(t.initial_state),
            [[turn] if turn else [] for turn in t.solution],
            t.solution,
            env._param_types(t.initial_state["involved_classes"]),
        )
        for t in tasks
    ]
    started = time.perf_counter()
    verdicts = [check_turns(*job).success for job in jobs]
    return verdicts, time.perf_counter() - started


def replay_official(category: str, tasks: list[Task]) -> tuple[list[bool], float]:
    entries = {e["id"]: e for e in data.load_entries(category)}
    jobs = [
        (
            entries[t.lineage["bfcl_id"]],
            [[turn] if turn else [] for turn in data.solution_strings(t.solution)],
            t.checker["ground_truth"],
        )
        for t in tasks
    ]
    started = time.perf_counter()
    verdicts = [bool(official_check(entry, steps, truth)["valid"]) for entry, steps, truth in jobs]
    return verdicts, time.perf_counter() - started


def step_latencies(name: str, tasks: list[Task], **options: Any) -> list[float]:
    latencies: list[float] = []
    for task in tasks:
        replay_reference(TimedEnv(envs.make(name, **options), latencies), task)
    return latencies


def percentiles(latencies: list[float]) -> tuple[float, float]:
    """Median and p99 in milliseconds."""
    ordered = sorted(latencies)
    return 1e3 * statistics.median(ordered), 1e3 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def summary(latencies: list[float]) -> str:
    median, p99 = percentiles(latencies)
    return f"median {median:.3f} ms, p99 {p99:.3f} ms over {len(latencies)} steps"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("bfcl-replay", __doc__)
    parser.add_argument("--category", default="base", help="base, miss_func, miss_param or long_context")
    parser.add_argument("--split", default="all")
    args = parser.parse_args(argv)
    category = data.category_name(args.category)
    tag = f"bfcl-eval {data.bfcl_version()} | {category} {args.split}"

    started = time.perf_counter()
    tasks = envs.make("bfcl", category=category).tasks(args.split)
    print(f"{tag} | loaded {len(tasks)} tasks in {time.perf_counter() - started:.2f} s")
    ours, ours_s = replay_ours(category, tasks)
    print(f"{tag} | ours: {sum(ours)}/{len(ours)} succeed, wall {ours_s:.2f} s (reset + steps + evaluate)")
    checked, checked_s = check_ours(category, tasks)
    print(
        f"{tag} | ours, checker only on the same calls: {sum(checked)}/{len(checked)} succeed, {checked_s:.2f} s"
    )
    official, official_s = replay_official(category, tasks)
    agree = sum(a == b for a, b in zip(ours, official, strict=True))
    print(
        f"{tag} | official multi_turn_checker on the same calls: {sum(official)}/{len(official)} valid, "
        f"{official_s:.2f} s; verdicts agree on {agree}/{len(ours)}"
    )
    bfcl_steps = step_latencies("bfcl", tasks, category=category)
    print(f"{tag} | step latency bfcl: {summary(bfcl_steps)}")
    world = envs.make("toolworld").tasks("train")
    world_steps = step_latencies("toolworld", world)
    print(f"{tag} | step latency toolworld (train, {len(world)} tasks): {summary(world_steps)}")
    figures = {"replay, ours": figure(ours_s, "s"), "tasks that succeed": figure(sum(ours), ""),
               "tasks": figure(len(ours), ""), "checker alone, ours": figure(checked_s, "s"),
               "official checker": figure(official_s, "s"), "verdicts that agree": figure(agree, "")}  # fmt: skip
    for env_name, latencies in (("bfcl", bfcl_steps), ("toolworld", world_steps)):
        median, p99 = percentiles(latencies)
        figures |= {f"{env_name} step median": figure(median, "ms"), f"{env_name} step p99": figure(p99, "ms")}
    record_result("bfcl-replay", figures, command=command_line("bfcl-replay", argv), variant=category,
                  note=f"bfcl-eval {data.bfcl_version()}")  # fmt: skip


if __name__ == "__main__":
    main()
