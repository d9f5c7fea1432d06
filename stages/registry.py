"""All stages by name, and which of them a given round runs, in order.

Round r: [bootstrap, baseline in round 0] -> rollout -> (feedback phases, when evolution is on)
-> grpo_update -> [evaluate every `eval.every` rounds].
"""

from __future__ import annotations

from stages.bootstrap import BOOTSTRAP
from stages.config import CoevolveConfig
from stages.evaluate import BASELINE, EVALUATE
from stages.grpo_update import GRPO_UPDATE
from stages.rollout import ROLLOUT
from stages.runner import StageDef

STAGES: dict[str, StageDef] = {s.name: s for s in (BOOTSTRAP, BASELINE, ROLLOUT, GRPO_UPDATE, EVALUATE)}


def get_stage(name: str) -> StageDef:
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(STAGES)}")
    return STAGES[name]


def round_plan(config: CoevolveConfig, round_: int) -> list[StageDef]:
    """The stages round `round_` runs, in dependency order."""
    plan = []
    if round_ == 0:
        plan.append(BOOTSTRAP)
        if config.eval.baseline and config.eval.every:
            plan.append(BASELINE)
    plan += [ROLLOUT, GRPO_UPDATE]
    if config.eval.every and (round_ + 1) % config.eval.every == 0:
        plan.append(EVALUATE)
    return plan
