"""The learning benchmark's plan: every run is evaluated after its last round, whatever `--rounds` says."""

from __future__ import annotations

from coevolve.benchmarks.learning.plan import Plan
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
