"""The learning-rate schedule over a whole run: the rate of an optimizer step from its index alone.

A run's optimizer steps are numbered across rounds, ``round * steps_per_round + k`` for the k-th step of a
round's update (``steps_per_round = epochs * mini_batches``, `train` config), whether or not every step is
taken (a round without signal takes none). The rate of step ``i`` is ``lr * LrSchedule.factor(i)``, a pure
function of ``i``: nothing is kept between steps, so an update continued from a checkpoint (or with a fresh
optimizer) uses exactly the rates an uninterrupted run uses. `rl.update.grpo_update` sets the rate of every
parameter group before each optimizer step.

The shapes are transformers' (TRL's `lr_scheduler_type`), for a 0-based step index i, W warmup steps and
T steps in all:

    warmup (i < W)          i / W              (the first step's rate is 0, as in transformers)
    constant_with_warmup    1
    linear                  (T - i) / (T - W)
    cosine                  (1 + cos(pi * (i - W) / (T - W))) / 2

Past T the rate stays at the schedule's end (0 for `linear` and `cosine`): a run continued beyond the
rounds its schedule spans does not start a second cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

SchedulerType = Literal["constant", "linear", "cosine", "constant_with_warmup"]
"""TRL's (transformers') `lr_scheduler_type` values offered here."""


@dataclass(frozen=True)
class LrSchedule:
    """A schedule's shape: the multiplier of the base rate at each optimizer step of the run."""

    kind: SchedulerType
    warmup_steps: int = 0
    total_steps: int | None = None  # T, needed by `linear` and `cosine`

    def factor(self, step: int) -> float:
        """The multiplier of the base rate at 0-based optimizer step ``step`` of the run."""
        if step < self.warmup_steps:
            return step / self.warmup_steps
        if self.kind in ("constant", "constant_with_warmup"):
            return 1.0
        if self.total_steps is None:
            raise ValueError(f"LrSchedule: {self.kind} needs total_steps")
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        if self.kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))


def make_schedule(kind: SchedulerType, *, warmup_steps: int = 0, warmup_ratio: float = 0.0,
                  total_steps: int | None = None) -> LrSchedule | None:  # fmt: skip
    """The schedule of these settings (`warmup_ratio` of ``total_steps``, rounded up, as transformers does);
    None for a constant rate (without warmup), where the optimizer's own rate is left as it is."""
    if warmup_ratio:
        if total_steps is None:
            raise ValueError("make_schedule: warmup_ratio needs total_steps")
        warmup_steps = math.ceil(warmup_ratio * total_steps)
    if kind in ("constant", "constant_with_warmup") and warmup_steps == 0:
        return None
    if kind in ("linear", "cosine") and total_steps is None:
        raise ValueError(f"make_schedule: {kind} needs total_steps")
    return LrSchedule(kind, warmup_steps, total_steps)
