"""The settings of one GRPO update, derived once from the run config and passed as one typed object.

The grpo_update stage calls `update_hyperparams(config, round)` and hands the result to `rl.trainer`,
in its own process or, as JSON (`to_json` / `from_json`, exact: floats round-trip), to every process
`accelerate launch` starts; nothing below the stage reads the config again.

    hp = update_hyperparams(config, round_=3)   # UpdateHyperparams(lr=2e-05, ..., first_step=3)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from coevolve.config import CoevolveConfig
from coevolve.rl.advantages import ScaleRewards
from coevolve.rl.is_correction import ISCorrection
from coevolve.rl.plan import LossNormalization
from coevolve.rl.schedule import LrSchedule, make_schedule


@dataclass(frozen=True)
class UpdateHyperparams:
    """Knobs of one GRPO update (`update_hyperparams` maps the run config onto these)."""

    lr: float
    clip_low: float = 0.2
    clip_high: float = 0.28
    beta: float = 0.0
    micro_batch_size: int = 4
    epochs: int = 1
    mini_batches: int = 1
    max_grad_norm: float | None = 1.0  # None or <= 0: measure the norm, do not clip
    temperature: float = 1.0  # sampling temperature of the rollouts
    weight_decay: float = 0.0
    shared_prefix: bool = True  # encode a group's common prefix once (exact; plain path if unsupported)
    loss_normalization: LossNormalization = "batch_tokens"  # what a step's token losses are divided by
    fixed_tokens: int | None = None  # the constant of loss_normalization fixed_tokens (Dr. GRPO's)
    scale_rewards: ScaleRewards = "group"  # what centred rewards are divided by (`rl.advantages`)
    drop_zero_std_groups: bool = False  # rows of all-equal-reward groups left out even when beta > 0
    lr_schedule: LrSchedule | None = None  # None: the optimizer's own rate, untouched
    first_step: int = 0  # the run's index of this update's first optimizer step (the schedule's clock)
    is_correction: ISCorrection | None = None  # weigh the engine's samples (`rl.is_correction`); None: off

    def step_lr(self, step: int) -> float:
        """The scheduled rate of this update's optimizer step ``step`` (0-based); needs ``lr_schedule``."""
        if self.lr_schedule is None:
            raise ValueError("UpdateHyperparams.step_lr: no lr_schedule (the rate is the optimizer's)")
        return self.lr * self.lr_schedule.factor(self.first_step + step)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UpdateHyperparams:
        schedule, correction = data.get("lr_schedule"), data.get("is_correction")
        return cls(**{**data, "lr_schedule": None if schedule is None else LrSchedule(**schedule),
                      "is_correction": None if correction is None else ISCorrection(**correction)})  # fmt: skip


def update_hyperparams(config: CoevolveConfig, round_: int) -> UpdateHyperparams:
    """The GRPO update's settings from the run config for the update of round `round_`, whose first optimizer
    step is the run's step `round_ x epochs x mini_batches` (the lr schedule's clock, `rl.schedule`)."""
    t = config.train
    correction = (ISCorrection(t.vllm_importance_sampling_mode, t.vllm_importance_sampling_cap)
                  if t.importance_sampling_on(served=bool(config.model.servers)) else None)  # fmt: skip
    steps_per_round = t.epochs * t.mini_batches
    total = None if t.schedule_rounds is None else t.schedule_rounds * steps_per_round
    schedule = make_schedule(t.lr_scheduler_type, warmup_steps=t.warmup_steps, warmup_ratio=t.warmup_ratio,
                             total_steps=total)  # fmt: skip
    return UpdateHyperparams(
        lr=t.lr, clip_low=t.clip_low, clip_high=t.clip_high, beta=t.beta, micro_batch_size=t.micro_batch_size,
        epochs=t.epochs, mini_batches=t.mini_batches, max_grad_norm=t.max_grad_norm,
        temperature=config.rollout.temperature, weight_decay=t.weight_decay,
        shared_prefix=t.shared_prefix, loss_normalization=t.loss_normalization, fixed_tokens=t.fixed_tokens,
        scale_rewards=t.scale_rewards, drop_zero_std_groups=t.drop_zero_std_groups,
        lr_schedule=schedule, first_step=round_ * steps_per_round, is_correction=correction,
    )
