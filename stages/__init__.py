"""All stages by name, and which of them a given round runs, in order.

Round r: [bootstrap, baseline in round 0] -> rollout -> [signals -> explore -> triples -> abstract
-> verify -> merge when `evolve.every` > 0 and (r + 1) % every == 0] -> grpo_update -> [evaluate every
`eval.every` rounds]. With `evolve.verify_after_update` the evolution phases follow grpo_update.
"""

from __future__ import annotations

from coevolve.pipeline.runner import StageDef
from coevolve.stages.abstract import ABSTRACT
from coevolve.stages.bootstrap import BOOTSTRAP
from coevolve.stages.evaluate import BASELINE, EVALUATE
from coevolve.stages.explore import EXPLORE
from coevolve.stages.grpo_update import GRPO_UPDATE
from coevolve.stages.merge import MERGE
from coevolve.stages.rollout import ROLLOUT
from coevolve.stages.signals import SIGNALS
from coevolve.stages.triples import TRIPLES
from coevolve.stages.verify import VERIFY

from coevolve.config import CoevolveConfig

EVOLUTION: tuple[StageDef, ...] = (SIGNALS, EXPLORE, TRIPLES, ABSTRACT, VERIFY, MERGE)
"""The data-evolution phases, in dependency order."""

STAGES: dict[str, StageDef] = {
    s.name: s for s in (BOOTSTRAP, BASELINE, ROLLOUT, *EVOLUTION, GRPO_UPDATE, EVALUATE)
}


def get_stage(name: str) -> StageDef:
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    return STAGES[name]


def evolves(config: CoevolveConfig, round_: int) -> bool:
    """Whether round `round_` runs the data-evolution phases (every `evolve.every` rounds)."""
    every = config.evolve.every
    return every > 0 and (round_ + 1) % every == 0


def round_plan(config: CoevolveConfig, round_: int) -> list[StageDef]:
    """The stages round `round_` runs, in dependency order."""
    plan = []
    if round_ == 0:
        plan.append(BOOTSTRAP)
        if config.eval.baseline and config.eval.every:
            plan.append(BASELINE)
    plan.append(ROLLOUT)
    evolution = list(EVOLUTION) if evolves(config, round_) else []
    if config.evolve.verify_after_update:
        plan += [GRPO_UPDATE, *evolution]
    else:
        plan += [*evolution, GRPO_UPDATE]
    if config.eval.every and (round_ + 1) % config.eval.every == 0:
        plan.append(EVALUATE)
    return plan
