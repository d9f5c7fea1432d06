"""Statistics of the learning benchmark: success per arm over seeds; an arm's difference to another with a
paired bootstrap interval over seeds and task families and an exact sign test on the (seed, task) pairs
whose outcomes differ (McNemar's test when a task is one episode; it takes tasks as independent: read it
next to the interval); and the power of a plan, from the spread of per-seed differences measured in pilot
runs."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

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
    interval from resampling seeds and task families with replacement (a drawn family brings all its
    tasks: an update moves a family's tasks together, so they are no independent draws; a task of unknown
    family is its own cluster). Tasks are shared by both arms; so are seeds when both arms ran the same
    seeds (a seed fixes the task draws and the sampling RNG of both, so the comparison is paired: common
    random numbers), else each arm's seeds are drawn on their own."""
    final = evals.filter(pl.col("updates") == updates)
    table: dict[tuple[str, int], dict[str, float]] = {}
    cluster_of: dict[str, str] = {}
    for row in final.iter_rows(named=True):
        key = f"{row['split']}/{row['task_id']}"
        table.setdefault((row["arm"], row["seed"]), {})[key] = row["success"]
        family = row.get("family")
        cluster_of[key] = key if family is None else f"{row['split']}/{family}"
    seeds = {arm: sorted(s for (x, s) in table if x == arm) for arm in (a, b)}
    if not seeds[a] or not seeds[b]:
        return None
    tasks = sorted(set.intersection(*(set(v) for v in table.values())))
    if not tasks:
        return None
    clusters: dict[str, list[str]] = {}
    for task in tasks:
        clusters.setdefault(cluster_of[task], []).append(task)
    units = sorted(clusters)

    def mean(arm: str, seed_draw: list[int], task_draw: list[str]) -> float:
        return sum(table[(arm, s)][t] for s in seed_draw for t in task_draw) / (
            len(seed_draw) * len(task_draw)
        )

    point = mean(a, seeds[a], tasks) - mean(b, seeds[b], tasks)
    rng = random.Random(seed)
    draws = []
    for _ in range(iterations):
        task_draw = [task for unit in rng.choices(units, k=len(units)) for task in clusters[unit]]
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


def paired_outcomes(evals: pl.DataFrame, a: str, b: str, *, updates: int) -> list[tuple[float, float]]:
    """(success of `a`, success of `b`) per (seed, split, task) that both arms evaluated after `updates`."""
    final = evals.filter(pl.col("updates") == updates)
    table = {(r["arm"], r["seed"], r["split"], r["task_id"]): float(r["success"]) for r in final.iter_rows(named=True)}
    keys = sorted({k[1:] for k in table if k[0] == a} & {k[1:] for k in table if k[0] == b})
    return [(table[(a, *k)], table[(b, *k)]) for k in keys]


def mcnemar_exact(wins: int, losses: int) -> float:
    """Two-sided exact McNemar test: the probability, under no difference, of discordant pairs splitting at
    least this unevenly (binomial with p = 1/2 over the wins + losses discordant pairs)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_test(evals: pl.DataFrame, a: str, b: str, *, updates: int) -> dict[str, float | int] | None:
    """Pairs, discordant pairs (`a` scored higher / `b` scored higher) and the exact two-sided sign test of
    a - b on them: McNemar's test when each task is one episode (`a` alone solved / `b` alone solved), the
    sign test on the tasks' success rates when each is several (`eval.samples`)."""
    pairs = paired_outcomes(evals, a, b, updates=updates)
    if not pairs:
        return None
    wins = sum(x > y for x, y in pairs)
    losses = sum(x < y for x, y in pairs)
    return {"pairs": len(pairs), "wins": wins, "losses": losses, "p": mcnemar_exact(wins, losses)}


def seed_differences(evals: pl.DataFrame, a: str, b: str, *, updates: int) -> list[float]:
    """Per seed both arms ran: mean success of `a` minus `b` over the tasks both evaluated."""
    final = evals.filter(pl.col("updates") == updates, pl.col("arm").is_in([a, b]))
    per = final.group_by("arm", "seed").agg(success=pl.col("success").cast(pl.Float64).mean())
    means = {(r["arm"], r["seed"]): r["success"] for r in per.iter_rows(named=True)}
    return [means[(a, s)] - means[(b, s)] for s in sorted({s for _, s in means}) if (a, s) in means and (b, s) in means]


def power(sd: float, effect: float, seeds: int, *, alpha: float = 0.05) -> float:
    """Probability that a two-sided test at `alpha` detects a true mean difference `effect` (success-rate
    units) from `seeds` seeds whose per-seed differences spread with standard deviation `sd`: the normal
    approximation, with the seed as the unit (tasks within a seed share one trained model)."""
    if seeds < 1 or sd <= 0:
        return 1.0 if sd <= 0 and effect else 0.0
    z = NormalDist().inv_cdf(1 - alpha / 2)
    shift = effect / (sd / math.sqrt(seeds))
    return NormalDist().cdf(shift - z) + NormalDist().cdf(-shift - z)


def seeds_for_power(sd: float, effect: float, *, target: float = 0.8, alpha: float = 0.05, most: int = 200) -> int | None:
    """The fewest seeds reaching `target` power for `effect` (None: not within `most`)."""
    return next((n for n in range(2, most + 1) if power(sd, effect, n, alpha=alpha) >= target), None)


def family_table(evals: pl.DataFrame, split: str, final_updates: int, arms: list[str]) -> pl.DataFrame:
    """Per task family of `split`: success before any update (the shared warm start, mean over every run) and
    each arm's after the last update (mean over its seeds and the family's tasks): which families moved."""
    rows = evals.filter(pl.col("split") == split)
    if not rows.height:
        return pl.DataFrame()
    families = rows.group_by("family").agg(tasks=pl.col("task_id").n_unique(),
                                           baseline=pl.col("success").filter(pl.col("updates") == 0).mean())  # fmt: skip
    final = rows.filter(pl.col("updates") == final_updates).group_by("family", "arm").agg(pl.col("success").mean())
    for arm in [a for a in arms if a in set(final["arm"])]:
        mine = final.filter(pl.col("arm") == arm).select("family", pl.col("success").alias(arm))
        families = families.join(mine, on="family", how="left")
    return families.sort("family")
