"""Every stage by name, and which of them a round runs, in order.

Round r: [warm-start when the config has a `warm_start` section; bootstrap-explore -> bootstrap-triples -> bootstrap-abstract -> bootstrap-verify when
`dataset.bootstrap_tasks` > 0, then bootstrap, then baseline: round 0 only] -> rollout -> [signals ->
explore -> triples -> abstract -> verify -> merge every `evolve.every` rounds] -> grpo_update ->
[evaluate every `eval.every` rounds]. With `evolve.verify_after_update` the evolution follows grpo_update.
With `rollout.max_staleness` > 0 round r+1's rollout runs beside round r's grpo_update (`rollout_ahead_beside`).

    from coevolve.stages.round_plan import STAGES, round_plan
    [stage.name for stage in round_plan(config, 0)]
"""

from __future__ import annotations

from coevolve.config import CoevolveConfig
from coevolve.pipeline.stage import StageDef
from coevolve.stages.abstract.stage import ABSTRACT, BOOTSTRAP_ABSTRACT
from coevolve.stages.baseline.stage import BASELINE
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.evaluate.stage import EVALUATE
from coevolve.stages.explore.stage import BOOTSTRAP_EXPLORE, EXPLORE
from coevolve.stages.grpo_update.stage import GRPO_UPDATE
from coevolve.stages.merge.stage import MERGE
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.signals.stage import SIGNALS
from coevolve.stages.triples.stage import BOOTSTRAP_TRIPLES, TRIPLES
from coevolve.stages.verify.stage import BOOTSTRAP_VERIFY, VERIFY
from coevolve.stages.warm_start.stage import WARM_START

EVOLUTION: tuple[StageDef, ...] = (SIGNALS, EXPLORE, TRIPLES, ABSTRACT, VERIFY, MERGE)
"""The data-evolution phases, in dependency order."""

BOOTSTRAP_EVOLUTION: tuple[StageDef, ...] = (BOOTSTRAP_EXPLORE, BOOTSTRAP_TRIPLES, BOOTSTRAP_ABSTRACT, BOOTSTRAP_VERIFY)
"""The same phases, unguided, that synthesize D_0's tasks in round 0 before any rollout."""

STAGES: dict[str, StageDef] = {
    s.name: s for s in (WARM_START, *BOOTSTRAP_EVOLUTION, BOOTSTRAP, BASELINE, ROLLOUT, *EVOLUTION, GRPO_UPDATE, EVALUATE)
}


def get_stage(name: str) -> StageDef:
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    return STAGES[name]


def evolves(config: CoevolveConfig, round_: int) -> bool:
    """Whether round `round_` runs the data-evolution phases (every `evolve.every` rounds, up to
    `evolve.last_round`)."""
    every, last = config.evolve.every, config.evolve.last_round
    return every > 0 and (round_ + 1) % every == 0 and (last is None or round_ <= last)


def rollout_ahead_beside(config: CoevolveConfig, round_: int) -> StageDef | None:
    """With `rollout.max_staleness` > 0, the stage of round `round_` beside which round `round_`+1's rollout
    runs: grpo_update, when everything that rollout reads exists before it (D_{r+1}: the merge runs before
    the update; its policy, after round r-s, is older than this update). None: no overlap (synchronous, or
    `evolve.verify_after_update` merging after the update)."""
    if not config.rollout.max_staleness:
        return None
    plan = round_plan(config, round_)
    return None if MERGE in plan[plan.index(GRPO_UPDATE):] else GRPO_UPDATE


def round_plan(config: CoevolveConfig, round_: int) -> list[StageDef]:
    """The stages round `round_` runs, in dependency order."""
    plan: list[StageDef] = []
    if round_ == 0:
        plan += [WARM_START] if config.warm_start.policy_tasks or config.warm_start.teacher_tasks else []
        plan += [*BOOTSTRAP_EVOLUTION] if config.dataset.bootstrap_tasks else []
        plan.append(BOOTSTRAP)
        if config.eval.baseline and config.eval.every:
            plan.append(BASELINE)
    plan.append(ROLLOUT)
    evolution = list(EVOLUTION) if evolves(config, round_) else []
    plan += [GRPO_UPDATE, *evolution] if config.evolve.verify_after_update else [*evolution, GRPO_UPDATE]
    if config.eval.every and (round_ + 1) % config.eval.every == 0:
        plan.append(EVALUATE)
    return plan
