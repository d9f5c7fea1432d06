"""The learning benchmark's plan: every run is evaluated after its last round, whatever `--rounds` says."""

from __future__ import annotations

from coevolve.benchmarks.learning.arms import Plan
from coevolve.config import load_config
from tests.conftest import CONFIGS

LEARNING = CONFIGS / "learning-smollm2.yaml"


def last_round_evaluated(plan: Plan) -> bool:
    every = load_config(plan.config, list(plan.overrides)).eval.every
    return every > 0 and plan.rounds % every == 0


def test_the_config_that_evaluates_its_last_round_is_left_as_it_is():
    plan = Plan.make(quick=False, config=LEARNING)
    assert plan.rounds == load_config(LEARNING).run.rounds and plan.overrides == ()
    assert last_round_evaluated(plan)


def test_other_rounds_get_an_evaluation_after_the_last_one():
    for plan in (Plan.make(quick=True, config=LEARNING), Plan.make(quick=False, config=LEARNING, rounds=5),
                 Plan.make(quick=False, config=LEARNING, rounds=3, overrides=["eval.every=0"])):  # fmt: skip
        assert last_round_evaluated(plan), plan.overrides
    assert Plan.make(quick=True, config=LEARNING).overrides == ("eval.max_tasks=8", "eval.every=2")


def test_the_ablation_regime_is_the_papers_table_each_arm_a_valid_config():
    """Every arm of the paper's ablation table loads as a config of its own, says which row it stands for,
    and changes what its row changes: + synthetic data is D_0 synthesized once with no evolution, the F
    sweep moves evolve.every, the weaker explorer keeps the config's own teacher."""
    from dataclasses import replace

    from coevolve.benchmarks.learning.arms import ARM_MEANINGS, ARMS, REGIMES, run_overrides
    from coevolve.stages.round_plan import evolves

    plan = Plan.make(quick=False, regime="ablation", seeds=1)
    assert plan.config == REGIMES["in-distribution"].config and plan.run_name("unguided", 0) == "ablation-unguided-s0"
    assert all(arm in ARM_MEANINGS for arm in ARMS)
    with_teacher = replace(plan, teacher_model=CONFIGS / "teacher-checkpoint")
    configs = {arm: load_config(plan.config, run_overrides(with_teacher, arm, 0)) for arm in plan.arms}
    evolutions = {arm: sum(evolves(c, r) for r in range(plan.rounds)) for arm, c in configs.items()}
    assert evolutions["grpo"] == evolutions["synthetic-data"] == 0 and configs["synthetic-data"].dataset.bootstrap_tasks
    assert evolutions["evolve-often"] > evolutions["coevolve"] > evolutions["evolve-rarely"] > 0
    assert configs["coevolve"].teacher.type == "local" and configs["weak-explorer"].teacher.type == "policy"
    assert "'+ synthetic data'" in ARM_MEANINGS["synthetic-data"] and "F = 40" in ARM_MEANINGS["evolve-rarely"]


def test_the_coverage_headline_compares_arms_on_its_primary_endpoint_at_its_effect():
    import polars as pl

    from coevolve.benchmarks.learning.report import headline_table

    plan = Plan.make(quick=False, regime="coverage", rounds=2, seeds=2, arms=["grpo", "oracle-gap"])
    assert (plan.endpoint, plan.experiment.effect) == ("gap-validation", 0.15)
    assert Plan.make(quick=False, config=LEARNING).endpoint is None
    # oracle-gap wins every gap task and loses every covered one: all splits together would say 0
    rows = [{"arm": arm, "seed": seed, "updates": 2, "split": split, "task_id": f"{split}{t}", "family": f"f{t}",
             "success": float((arm == "oracle-gap") == (split == "gap-validation"))}
            for arm in ("grpo", "oracle-gap") for seed in (0, 1) for split in ("gap-validation", "validation")
            for t in range(6)]  # fmt: skip
    row = headline_table(pl.DataFrame(rows), plan, {}).filter(pl.col("arm") == "oracle-gap").to_dicts()[0]
    assert row["- grpo on gap-validation (points)"] == "+100.0 [+100.0, +100.0]"
    assert row["McNemar p"].endswith("(12/0)") and row["power at +15"] == "1.00"
