"""The learning benchmark's paired statistics against values computed by hand."""

from __future__ import annotations

import polars as pl
import pytest

from coevolve.benchmarks.learning.statistics import (
    mcnemar_exact,
    paired_test,
    power,
    seed_differences,
    seeds_for_power,
)


def evals(rows: list[tuple[str, int, str, int]]) -> pl.DataFrame:
    return pl.DataFrame([{"arm": a, "seed": s, "split": "test", "task_id": t, "success": bool(x), "updates": 3}
                         for a, s, t, x in rows])  # fmt: skip


def test_mcnemar_is_the_two_sided_binomial_tail_of_the_discordant_pairs():
    assert mcnemar_exact(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 0) == pytest.approx(2 / 64)


def test_paired_test_counts_pairs_both_arms_evaluated():
    table = evals([("a", 0, "t1", 1), ("b", 0, "t1", 0), ("a", 0, "t2", 0), ("b", 0, "t2", 0),
                   ("a", 1, "t1", 1), ("b", 1, "t1", 1), ("a", 1, "t2", 1), ("b", 1, "t2", 0),
                   ("a", 2, "t1", 1)])  # seed 2 only for a: not a pair  # fmt: skip
    assert paired_test(table, "a", "b", updates=3) == {"pairs": 4, "wins": 2, "losses": 0, "p": 0.5}
    assert seed_differences(table, "a", "b", updates=3) == [0.5, 0.5]


def test_power_grows_with_seeds_and_reaches_the_target():
    assert power(0.1, 0.05, 4) < power(0.1, 0.05, 16) < power(0.1, 0.05, 64)
    assert power(0.1, 0.0, 10) == pytest.approx(0.05)  # no effect: the test's size
    n = seeds_for_power(0.1, 0.05)
    assert power(0.1, 0.05, n) >= 0.8 > power(0.1, 0.05, n - 1)
    assert n == 32  # (1.96 + 0.84)^2 x (0.1 / 0.05)^2 = 31.4


def test_the_bootstrap_resamples_families_not_tasks():
    """Arm a gains a whole family of 10 tasks over b (10 of 40 tasks): with tasks as the unit the interval
    excludes 0; with the family as the unit (4 families, one of them moved) it cannot."""
    from coevolve.benchmarks.learning.statistics import bootstrap_difference

    rows = [{"arm": arm, "seed": seed, "updates": 3, "split": "test", "task_id": f"{family}-{t}", "family": family,
             "success": int(arm == "a" and family == "f0")}
            for arm in ("a", "b") for seed in (0, 1) for family in ("f0", "f1", "f2", "f3") for t in range(10)]  # fmt: skip
    clustered = bootstrap_difference(pl.DataFrame(rows), "a", "b", updates=3)
    by_task = bootstrap_difference(pl.DataFrame([{**r, "family": None} for r in rows]), "a", "b", updates=3)
    assert clustered[0] == by_task[0] == pytest.approx(0.25)
    assert by_task[1] > 0 and clustered[1] == 0.0  # a draw without f0 leaves no difference


def test_the_family_table_shows_which_gap_families_moved_per_arm():
    import polars as pl

    from coevolve.benchmarks.learning.statistics import family_table

    rows = [{"arm": arm, "seed": 0, "updates": updates, "split": "gap-validation", "task_id": f"{family}{t}",
             "family": family, "success": float(updates == 2 and arm == "oracle-gap" and family == "deposit")}
            for arm in ("grpo", "oracle-gap") for updates in (0, 2) for family in ("deposit", "withdraw")
            for t in range(3)]  # fmt: skip
    table = family_table(pl.DataFrame(rows), "gap-validation", 2, ["grpo", "coevolve", "oracle-gap"])
    assert table.rows() == [("deposit", 3, 0.0, 0.0, 1.0), ("withdraw", 3, 0.0, 0.0, 0.0)]
    assert table.columns == ["family", "tasks", "baseline", "grpo", "oracle-gap"]
