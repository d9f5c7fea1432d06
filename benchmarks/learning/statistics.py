"""Statistics of the learning benchmark: success per arm over seeds, and the coevolve - grpo difference
with a bootstrap interval over seeds and tasks."""

from __future__ import annotations

import random

import polars as pl


def summary(curve: pl.DataFrame, final_updates: int) -> pl.DataFrame:
    """Per arm and split: final and best success (means over seeds), and the zero-shot baseline."""
    over_seeds = curve.group_by("arm", "split", "updates").agg(
        success=pl.col("success").mean(), seeds=pl.len()
    )
    return (
        over_seeds.group_by("arm", "split")
        .agg(
            baseline=pl.col("success").filter(pl.col("updates") == 0).first(),
            final=pl.col("success").filter(pl.col("updates") == final_updates).first(),
            best=pl.col("success").filter(pl.col("updates") > 0).max(),
            seeds=pl.col("seeds").max(),
        )
        .sort("split", "arm")
    )


def bootstrap_difference(
    evals: pl.DataFrame, a: str, b: str, *, updates: int, iterations: int = 2000, seed: int = 0
) -> tuple[float, float, float] | None:
    """Mean held-out success of arm `a` minus arm `b` after `updates` updates, with a 95 % percentile
    interval from resampling seeds and tasks with replacement. Tasks are shared by both arms; so are
    seeds when both arms ran the same seeds (a seed fixes the task draws and the sampling RNG of both,
    so the comparison is paired: common random numbers), else each arm's seeds are drawn on their own."""
    final = evals.filter(pl.col("updates") == updates)
    table: dict[tuple[str, int], dict[str, int]] = {}
    for row in final.iter_rows(named=True):
        table.setdefault((row["arm"], row["seed"]), {})[f"{row['split']}/{row['task_id']}"] = row["success"]
    seeds = {arm: sorted(s for (x, s) in table if x == arm) for arm in (a, b)}
    if not seeds[a] or not seeds[b]:
        return None
    tasks = sorted(set.intersection(*(set(v) for v in table.values())))
    if not tasks:
        return None

    def mean(arm: str, seed_draw: list[int], task_draw: list[str]) -> float:
        return sum(table[(arm, s)][t] for s in seed_draw for t in task_draw) / (
            len(seed_draw) * len(task_draw)
        )

    point = mean(a, seeds[a], tasks) - mean(b, seeds[b], tasks)
    rng = random.Random(seed)
    draws = []
    for _ in range(iterations):
        task_draw = rng.choices(tasks, k=len(tasks))
        seed_a = rng.choices(seeds[a], k=len(seeds[a]))
        seed_b = seed_a if seeds[a] == seeds[b] else rng.choices(seeds[b], k=len(seeds[b]))
        draws.append(mean(a, seed_a, task_draw) - mean(b, seed_b, task_draw))
    draws.sort()
    return point, draws[int(0.025 * iterations)], draws[int(0.975 * iterations) - 1]


def differences(evals: pl.DataFrame, a: str, b: str, *, updates: int) -> dict[str, tuple[float, float, float] | None]:
    """`bootstrap_difference` of `a` - `b` on each split, then on all splits together (key "both splits")."""
    got = {split: bootstrap_difference(evals.filter(pl.col("split") == split), a, b, updates=updates)
           for split in sorted(evals["split"].unique())}  # fmt: skip
    got["both splits"] = bootstrap_difference(evals, a, b, updates=updates)
    return got
