"""Bounded staleness against synchronous rounds: rounds per hour at equal samples, in one process.

    coevolve bench staleness                                   # test-tiny, 4 rounds, 2 sets of runs
    coevolve bench staleness configs/test-tiny.yaml --rounds 3 --pairs 3 --set eval.every=0

Runs the real `coevolve` Prefect flow on fresh runs of one config, alternating (`ARMS`) a synchronous run
(`rollout.max_staleness: 0`) and a run with `rollout.max_staleness: 1` (round r+1's rollout beside round r's
update, `flows.coevolve.RolloutAhead`), each on the process's math threads and on one, set after set, so a
load that comes and goes on the machine falls on every arm alike. Every arm draws the same tasks and
episodes per round (equal samples); set i runs with `run.seed` i. The stale arms' updates correct for their
older samples (`train.vllm_importance_sampling_correction: true`); the synchronous arms' are the on-policy
ones, uncorrected. A run's wall time is that of its rounds, from its round-0 rollout's start to the end of
its last stage (bootstrap and baseline left out: the same in every arm), read from the stage manifests.
Recorded in `benchmarks/results/staleness.jsonl`: rounds per hour of each arm (over all its runs), each
stale arm's ratio to the synchronous one on as many threads (over all runs, and the lowest and highest
set), each arm's seconds per round in its rollouts and its updates (the two halves the overlap runs at
once, each then on half the math threads), and each arm's learning curve: the rollout's mean reward per
round, averaged over the seeds (with staleness round r samples an older policy).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

ARMS = {"synchronous": (0, 0), "staleness 1": (1, 0), "synchronous, 1 thread": (0, 1),
        "staleness 1, 1 thread": (1, 1)}  # fmt: skip
"""Arm name -> (`rollout.max_staleness`, torch math threads of the flow: 0 = as the process has them). The
one-thread arms give every op one thread, as each overlapped half gets: on a loaded machine the thread count
alone changes the speed, and those two arms tell the overlap's gain apart from it."""
COMPARED = (("staleness 1", "synchronous"), ("staleness 1, 1 thread", "synchronous, 1 thread"))
"""(stale arm, synchronous arm) pairs whose ratio is recorded."""


def run_arm(config: str, root: Path, run: str, rounds: int,
            overrides: list[str]) -> tuple[float, list[float], dict[str, float]]:
    """One fresh run of `config`: (wall seconds of its rounds, the rollout's mean reward per round, the
    seconds of its rollouts and of its updates, summed)."""
    from coevolve.flows.coevolve import coevolve
    from coevolve.storage.layout import MANIFEST, RunLayout
    from coevolve.storage.manifest import Manifest
    from coevolve.storage.store import RunStore

    coevolve(config, run=run, rounds=rounds, overrides=overrides, root=str(root))
    store = RunStore(RunLayout(root, run))
    manifests = [Manifest.read(path) for path in store.layout.run_dir.glob(f"round=*/stage=*/{MANIFEST}")]
    manifests = [m for m in manifests if m is not None and m.stage not in ("bootstrap", "baseline")]
    start = store.completed(0, "rollout").started_at
    end = max(m.started_at + m.seconds for m in manifests)
    rewards = [store.completed(r, "rollout").outputs["mean_reward"] for r in range(rounds)]
    stages = {name: sum(m.seconds for m in manifests if m.stage == name)
              for name in ("rollout", "grpo_update")}  # fmt: skip
    return end - start, rewards, stages


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("staleness", __doc__)
    parser.add_argument("config", nargs="?", default="test-tiny")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=2, 
                        help="sets of runs (one per arm, alternating), seeds 0..pairs-1")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from coevolve.flows.prefect_api import prefect_api

    root = Path(tempfile.mkdtemp(prefix="coevolve-staleness-"))
    walls: dict[str, list[float]] = {arm: [] for arm in ARMS}
    curves: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    stage_seconds: dict[str, dict[str, float]] = {arm: {"rollout": 0.0, "grpo_update": 0.0} for arm in ARMS}
    with prefect_api():  # a temporary server that ends with the benchmark, killed or not
        for pair in range(args.pairs):
            for arm, (staleness, threads) in ARMS.items():
                sets = [*args.overrides, f"run.seed={pair}", f"rollout.max_staleness={staleness}",
                        f"train.vllm_importance_sampling_correction={str(bool(staleness)).lower()}"]
                run = f"s{staleness}-t{threads}-seed{pair}"
                with math_threads(threads):
                    wall, rewards, stages = run_arm(args.config, root, run, args.rounds, sets)
                walls[arm].append(wall)
                stage_seconds[arm] = {k: v + stages[k] for k, v in stage_seconds[arm].items()}
                curves[arm].append(rewards)
                print(f"pair {pair} {arm}: {wall:.1f} s for {args.rounds} rounds; rollout reward per round "
                      f"{', '.join(f'{r:.3f}' for r in rewards)}", flush=True)
    arm_rounds = args.pairs * args.rounds
    per_round = {f"{arm} {stage} s/round": figure(round(seconds / arm_rounds, 2), "s")
                 for arm, by_stage in stage_seconds.items() for stage, seconds in by_stage.items()}  # fmt: skip
    record_result("staleness", figures(walls, curves, args.rounds) | per_round,
                  command=command_line("staleness", argv), note=args.note)  # fmt: skip


@contextmanager
def math_threads(threads: int) -> Iterator[None]:
    """torch's math threads of this thread set to `threads` (0: left as they are) while inside."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def figures(walls: dict[str, list[float]], curves: dict[str, list[list[float]]], rounds: int) -> dict:
    """Rounds per hour of each arm (all its rounds over all its wall time), the ratio, each pair's ratio
    (spread), and each arm's mean rollout reward per round over the seeds."""
    out, rate = {}, {}
    for arm, seconds in walls.items():
        rate[arm] = 3600 * rounds * len(seconds) / sum(seconds)
        out[f"{arm} rounds/hour"] = figure(round(rate[arm], 1), "rounds/h")
    for stale, sync in COMPARED:
        out[f"{stale} x {sync}"] = figure(round(rate[stale] / rate[sync], 3), "x")
        pair_ratios = [a / b for a, b in zip(walls[sync], walls[stale], strict=True)]
        out[f"{stale} x {sync}, lowest set"] = figure(round(min(pair_ratios), 3), "x")
        out[f"{stale} x {sync}, highest set"] = figure(round(max(pair_ratios), 3), "x")
    for arm, runs in curves.items():
        for r in range(rounds):
            out[f"{arm} reward round {r}"] = figure(round(statistics.fmean(run[r] for run in runs), 4), "")
    return out


if __name__ == "__main__":
    main()
