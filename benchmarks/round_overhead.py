"""Non-model overhead of a round: everything that is not generation or the GRPO update's compute.

    coevolve bench round-overhead configs/toolworld-smollm2.yaml --rounds 2

Runs the real `coevolve` Prefect flow on a fresh run and times, per round, the engine's `generate`
calls and `rl.update.grpo_update` (forward, backward, optimizer). The rest of the round's wall time
(environment steps, tokenising observations, Parquet writes and manifests, the checkpoint, the DuckDB
catalog, Prefect orchestration) is the overhead the GRPO-loop issue asks to keep <= 5 %. Each round's
seconds and overhead share go to `benchmarks/results/round-overhead.jsonl`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from coevolve import (
    llm,  # noqa: E402
    rl,  # noqa: E402
)
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

SPANS: dict[str, list[tuple[float, float]]] = defaultdict(list)


def timed(name: str, fn):
    def wrapper(*args, **kwargs):
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPANS[name].append((start, time.time()))
    return wrapper


def inside(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(min(b, hi) - max(a, lo) for a, b in spans if b > lo and a < hi)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("round-overhead", __doc__)
    parser.add_argument("config")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["COEVOLVE_HOME"] = tempfile.mkdtemp(prefix="coevolve-overhead-")

    llm.hf_engine.HfEngine.generate = timed("generate", llm.hf_engine.HfEngine.generate)
    rl.update.grpo_update = timed("update", rl.update.grpo_update)
    rl.checkpoint.save_checkpoint = timed("checkpoint", rl.checkpoint.save_checkpoint)
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.prefect_api import prefect_api
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.store import RunStore

    with prefect_api():  # a temporary server that ends with the benchmark, killed or not
        coevolve(args.config, run="overhead", rounds=args.rounds, overrides=args.overrides)
    store = RunStore(RunLayout(Path(os.environ["COEVOLVE_HOME"]), "overhead"))
    print(f"{'round':>5} {'wall s':>8} {'generate':>9} {'update':>8} {'checkpoint':>10} {'overhead':>9} {'share':>6}")
    figures = {}
    for r in range(args.rounds):
        manifests = [store.manifest(r, s) for s in ("rollout", "grpo_update", "evaluate")]
        manifests = [m for m in manifests if m is not None]
        lo, hi = min(m.started_at for m in manifests), max(m.started_at + m.seconds for m in manifests)
        wall = hi - lo
        gen, upd = inside(SPANS["generate"], lo, hi), inside(SPANS["update"], lo, hi)
        ckpt = inside(SPANS["checkpoint"], lo, hi)
        overhead = wall - gen - upd
        print(f"{r:>5} {wall:>8.1f} {gen:>9.1f} {upd:>8.1f} {ckpt:>10.1f} {overhead:>9.1f} {overhead / wall:>6.1%}")
        figures |= {f"round {r} wall": figure(wall, "s"), f"round {r} generate": figure(gen, "s"),
                    f"round {r} update": figure(upd, "s"), f"round {r} checkpoint": figure(ckpt, "s"),
                    f"round {r} overhead share": figure(100 * overhead / wall, "%")}  # fmt: skip
    print("(round 0 excludes bootstrap and baseline; checkpoint time is part of the overhead)")
    record_result("round-overhead", figures, command=command_line("round-overhead", argv))


if __name__ == "__main__":
    main()
