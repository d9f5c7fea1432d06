"""signals: mark the weak rollout trajectories of the rounds since the previous evolution (step 2 of the loop).

Runs the pure rules of `stages.signals.rules.extract_signals` (forgetting, boundary, rare, unused) once for each
round since the previous evolution (rounds r-F+1..r, F = `evolve.every`), so no round's rollouts go
unexamined. Reads the rollout `trajectories` of every round so far (forgetting looks at a task's last W
*attempted* rounds, which may lie far back when the dataset is large) and the rollout `steps` of rounds
r-F-W+2..r (`rare_window`: rare counts each marked round r' over its own W calendar rounds r'-W+1..r').
With the `unused` kind or `signals.rare_unused` (neither the paper's) it also reads the round's dataset, for
the tools each marked round's tasks offer. Writes `signals`.

    coevolve stage signals --run demo --round 9
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coevolve.contracts.signals import UNUSED, WRITES, SignalsOutputs
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import (
    Artifact,
    Dataset,
    Inputs,
    StageDef,
    StageResult,
    rounds_so_far,
)

if TYPE_CHECKING:
    import polars as pl

TRAJECTORY_COLUMNS = ["trajectory_id", "source", "task_id", "round", "sample", "reward"]
STEP_COLUMNS = ["trajectory_id", "tool", "step", "call_index"]


def marked_rounds(round_: int, every: int) -> list[int]:
    """The rounds whose trajectories an evolution in round `round_` examines: those since the previous one."""
    return [r for r in range(round_ + 1) if r > round_ - max(every, 1)]


def rare_window(ctx: RunContext, round_: int) -> list[int]:
    """The rounds whose `steps` the rare rule counts: the union of the marked rounds' own windows.

    Each marked round r' counts actions over r'-W+1..r', so the earliest, r-F+1, reaches back to
    r-F-W+2. Loading only the last W rounds (r-W+1..r) would cut every earlier round's window short
    (with F = W = 10 the earliest round counted 1 round of actions instead of 10), inventing and
    hiding rare patterns. The cache key covers these rounds through the read and W, F through `config`.
    """
    first = marked_rounds(round_, ctx.config.evolve.every)[0] - ctx.config.signals.window + 1
    return [r for r in range(round_ + 1) if r >= first]


def ledger_signals(
    trajectories: pl.DataFrame,
    steps: pl.DataFrame,
    rounds: list[int],
    *,
    window: int,
    rare_theta: float,
    kinds: tuple[str, ...],
    rare_pattern: str,
    offered: pl.DataFrame | None = None,
    rare_unused: bool = False,
    forgetting_score: str = "success",
) -> list[dict]:
    """Signal rows for each round in `rounds` (the marked trajectory's round as `trajectory_round`)."""
    import polars as pl

    from coevolve.stages.signals.rules import extract_signals  # polars and duckdb: only when signals run

    if trajectories.height:
        trajectories = trajectories.filter(pl.col("source") == "rollout")
    rows = []
    for r in rounds:
        found = extract_signals(trajectories, steps, round=r, window=window, rare_theta=rare_theta, kinds=kinds,
                                rare_pattern=rare_pattern, offered=offered, rare_unused=rare_unused,
                                forgetting_score=forgetting_score)
        rows += found.rename({"round": "trajectory_round"}).to_dicts()
    return rows


def compute_signals(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    import polars as pl

    cfg = ctx.config.signals
    trajectories = pl.from_arrow(inputs["trajectories"].table(TRAJECTORY_COLUMNS))
    steps = pl.from_arrow(inputs["steps"].table(STEP_COLUMNS))
    rounds = marked_rounds(round_, ctx.config.evolve.every)
    offered = offered_tools(ctx, inputs["dataset"], trajectories, rounds) if needs_offered(ctx.config) else None
    rows = ledger_signals(trajectories, steps, rounds, window=cfg.window, rare_theta=cfg.rare_theta,
                          kinds=cfg.kinds, rare_pattern=cfg.rare_pattern, offered=offered,
                          rare_unused=cfg.rare_unused, forgetting_score=cfg.forgetting_score)
    counts = Counter(row["kind"] for row in rows)
    return StageResult({"signals": rows}, SignalsOutputs(len(rows), {k: counts[k] for k in cfg.kinds}).manifest())


def offered_tools(ctx: StageContext, dataset, trajectories: pl.DataFrame, rounds: list[int]) -> pl.DataFrame:
    """(task_id, tool): the tools each task rolled out in `rounds` offers, from a fresh episode of it."""
    import polars as pl

    from coevolve.envs.base import Task

    ids = trajectories.filter(pl.col("round").is_in(rounds))["task_id"].unique().sort().to_list()
    rows = []
    for row in dataset.task_rows(ids):
        env = ctx.make_env()
        try:
            observation = env.reset(Task.from_row(row))
        finally:
            env.close()
        rows += [{"task_id": row["task_id"], "tool": tool["function"]["name"]} for tool in observation.tools]
    return pl.DataFrame(rows, schema={"task_id": pl.String, "tool": pl.String})


def needs_offered(config: Any) -> bool:
    """Whether the signals need the tools each task offers: the `unused` kind, or `signals.rare_unused`."""
    return config.signals.rare_unused or UNUSED.name in config.signals.kinds


@dataclass(frozen=True)
class WhenOffered:
    """The round's dataset, read (and part of the key) only when `needs_offered`; else None, as `When`."""

    read: Dataset

    def key_part(self, ctx: RunContext, round_: int) -> Any:
        return self.read.key_part(ctx, round_) if needs_offered(ctx.config) else None

    def load(self, ctx: RunContext, round_: int) -> Any:
        return self.read.load(ctx, round_) if needs_offered(ctx.config) else None


SIGNALS = StageDef(
    "signals", 1,
    config=("signals", "evolve.every", "env"),  # env: the offered tools come from resetting tasks
    reads={
        "trajectories": Artifact("rollout", "trajectories", rounds_so_far),
        "steps": Artifact("rollout", "steps", rare_window),
        "dataset": WhenOffered(Dataset()),
    },
    compute=compute_signals,
    writes=WRITES,
)
