"""signals (stage): mark the weak rollout trajectories of the last F rounds (step 2 of the loop).

Reads the `trajectories` and `steps` that rollout wrote (source `rollout`) and runs the pure rules of
`stages.signals.extract_signals` once for each round since the previous evolution (rounds r-F+1..r, F =
`evolve.every`), so no round's rollouts go unexamined. Trajectories are read from every earlier round
(forgetting looks at a task's last W *attempted* rounds, which may lie far back when the dataset is
large); steps only from the last W rounds (rare counts actions over W calendar rounds). Writes `signals`.

    coevolve stage signals --run demo --round 9
"""

from __future__ import annotations

from collections import Counter

import polars as pl
from coevolve.evolution.signals import extract_signals
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageDef, StageResult

_TRAJECTORY_COLUMNS = ["trajectory_id", "source", "task_id", "round", "sample", "reward"]
_STEP_COLUMNS = ["trajectory_id", "tool", "step", "call_index"]


def rollout_rounds(ctx: RunContext, round_: int) -> list[int]:
    """Rounds <= `round_` whose rollout completed."""
    return [r for r in range(round_ + 1) if ctx.store.manifest(r, "rollout") is not None]


def marked_rounds(ctx: RunContext, round_: int) -> list[int]:
    """The rounds whose trajectories this evolution examines: those since the previous evolution."""
    every = max(ctx.config.evolve.every, 1)
    return [r for r in rollout_rounds(ctx, round_) if r > round_ - every]


def _inputs(ctx: RunContext, round_: int) -> dict[str, str]:
    return {
        f"rollout:{r}": ctx.store.completed(r, "rollout").content_hash() for r in rollout_rounds(ctx, round_)
    }


def _read(ctx: RunContext, rounds: list[int], artifact: str, columns: list[str]) -> pl.DataFrame:
    frames = [pl.from_arrow(ctx.store.read(r, "rollout", artifact).select(columns)) for r in rounds]
    return pl.concat(frames) if frames else pl.DataFrame()


def ledger_signals(
    trajectories: pl.DataFrame,
    steps: pl.DataFrame,
    rounds: list[int],
    *,
    window: int,
    rare_theta: float,
    kinds: tuple[str, ...],
    rare_pattern: str,
) -> list[dict]:
    """Signal rows for each round in `rounds` (the marked trajectory's round as `trajectory_round`)."""
    if trajectories.height:
        trajectories = trajectories.filter(pl.col("source") == "rollout")
    rows = []
    for r in rounds:
        found = extract_signals(
            trajectories,
            steps,
            round=r,
            window=window,
            rare_theta=rare_theta,
            kinds=kinds,
            rare_pattern=rare_pattern,
        )
        rows += found.rename({"round": "trajectory_round"}).to_dicts()
    return rows


def compute_signals(ctx: RunContext, round_: int, key: str) -> StageResult:
    cfg = ctx.config.evolve
    rounds = rollout_rounds(ctx, round_)
    trajectories = _read(ctx, rounds, "trajectories", _TRAJECTORY_COLUMNS)
    steps = _read(ctx, [r for r in rounds if r > round_ - cfg.window], "steps", _STEP_COLUMNS)
    if steps.height == 0:
        steps = pl.DataFrame(
            schema={"trajectory_id": pl.String, "tool": pl.String, "step": pl.Int32, "call_index": pl.Int32}
        )
    rows = ledger_signals(
        trajectories,
        steps,
        marked_rounds(ctx, round_),
        window=cfg.window,
        rare_theta=cfg.rare_theta,
        kinds=cfg.kinds,
        rare_pattern=cfg.rare_pattern,
    )
    counts = Counter(row["kind"] for row in rows)
    return StageResult(
        {"signals": rows}, {"signals": len(rows), **{f"{k}_signals": counts[k] for k in cfg.kinds}}
    )


SIGNALS = StageDef("signals", 1, ("evolve",), _inputs, compute_signals)
