"""The metrics of one GRPO update (`rl.update.grpo_update`): per optimizer step and over the update.

Each micro-batch's `LossMetrics` is added to two sums: the update's (token-weighted over every micro-batch,
the `UpdateResult` averages and so the `updates` row) and its optimizer step's (the points a tracker logs
per step, `flows.tracking`). A step's record, under TRL's names where the meaning is the same:

    loss, pg_loss           the mini-batch loss (sum of its micro-batches' normalised losses)
    kl, clip_ratio,         token-weighted means over the step's policy tokens
    clip_ratio_low/high,
    ratio_mean
    entropy                 mean of -log p over the step's policy tokens (at the sampling temperature): the
                            sampled-token estimate of the policy's per-token entropy, unbiased while the
                            tokens are on-policy (the first step of a round), from log-probs the loss has
                            anyway; TRL's `entropy` sums over the vocabulary instead
    completion_length       policy tokens per trained row of the step
    grad_norm, learning_rate   the pre-clip norm and the rate the step's `optimizer.step()` used
    is_ratio_min/mean/max   with the engine's samples corrected (`rl.is_correction`): the weights after the cap,
                            over policy tokens (rows at sequence level); TRL's sampling/importance_sampling_ratio/*
    logp_diff_mean/max      |trainer's old - engine's log-prob| per policy token; TRL's
                            sampling/sampling_logp_difference/*

With several processes every process adds its own micro-batches; `summed_over` sums them (grad norm and
learning rate are the same on every process).
"""

from __future__ import annotations

from typing import Any

import torch

from coevolve.rl.is_correction import WeightStats
from coevolve.rl.loss import LossMetrics

WEIGHTED = ("kl", "clip_fraction", "clip_low_fraction", "clip_high_fraction", "ratio_mean")
IS_SUMS = ("is_sum", "is_count", "diff_sum", "diff_tokens")  # of the correction's weights (`add_weights`)
STEP_SUMS = ("loss", "pg_loss", *WEIGHTED, "neg_logp", "tokens", "rows", *IS_SUMS)  # summed over micro-batches
EXTREMES = ("is_neg_min", "is_max", "diff_max")  # the largest over micro-batches (the minimum negated)


class MetricsSum:
    """Accumulates `LossMetrics` of micro-batches into `UpdateResult` averages and per-step records."""

    def __init__(self) -> None:
        self.weighted = dict.fromkeys(WEIGHTED, 0.0)
        self.tokens = 0
        self.current = {**dict.fromkeys(STEP_SUMS, 0.0), **dict.fromkeys(EXTREMES, float("-inf"))}  # this step
        self.steps: list[dict[str, float]] = []  # STEP_SUMS, EXTREMES, grad_norm, lr of each finished step

    @property
    def step_loss(self) -> float:
        return self.current["loss"]

    def add(self, m: LossMetrics, neg_logp: float, rows: int) -> None:
        """One micro-batch: its loss metrics, the sum of -log p over its policy tokens, its row count."""
        for key in WEIGHTED:
            self.weighted[key] += getattr(m, key) * m.tokens
            self.current[key] += getattr(m, key) * m.tokens
        self.tokens += m.tokens
        for key, value in (("loss", m.loss), ("pg_loss", m.pg_loss), ("neg_logp", neg_logp),
                           ("tokens", m.tokens), ("rows", rows)):  # fmt: skip
            self.current[key] += value

    def add_weights(self, w: WeightStats) -> None:
        """One micro-batch's importance-sampling weights (`rl.is_correction.weight_stats`)."""
        for key, value in (("is_sum", w.ratio_sum), ("is_count", w.ratio_count), ("diff_sum", w.diff_sum),
                           ("diff_tokens", w.tokens)):  # fmt: skip
            self.current[key] += value
        for key, value in (("is_neg_min", -w.ratio_min), ("is_max", w.ratio_max), ("diff_max", w.diff_max)):
            self.current[key] = max(self.current[key], value)

    def end_step(self, grad_norm: float, lr: float) -> None:
        self.steps.append({**self.current, "grad_norm": grad_norm, "lr": lr})
        self.current = {**dict.fromkeys(STEP_SUMS, 0.0), **dict.fromkeys(EXTREMES, float("-inf"))}

    def summed_over(self, accelerator: Any) -> MetricsSum:
        """The sums of every process (each process ran different micro-batches of the same steps)."""
        local = torch.tensor(
            [self.weighted[k] for k in WEIGHTED] + [float(self.tokens)] + [s[k] for s in self.steps for k in STEP_SUMS],
            dtype=torch.float64, device=accelerator.device,
        )  # fmt: skip
        total = accelerator.reduce(local, reduction="sum").tolist()
        out = MetricsSum()
        out.weighted = dict(zip(WEIGHTED, total[: len(WEIGHTED)], strict=True))
        out.tokens = int(total[len(WEIGHTED)])
        sums = total[len(WEIGHTED) + 1 :]
        width = len(STEP_SUMS)
        extremes = [[float("-inf")] * len(EXTREMES)] * len(self.steps)
        corrected = any(sums[i * width + STEP_SUMS.index("is_count")] for i in range(len(self.steps)))
        if corrected:  # the same sums on every process, so all gather (as many steps each); each step's largest
            local_ext = torch.tensor([[s[k] for k in EXTREMES] for s in self.steps], dtype=torch.float64,
                                     device=accelerator.device)  # [steps, 3]
            extremes = accelerator.gather(local_ext).view(-1, *local_ext.shape).amax(dim=0).tolist()
        out.steps = [{**dict(zip(STEP_SUMS, sums[i * width : (i + 1) * width], strict=True)),
                      **dict(zip(EXTREMES, extremes[i], strict=True)),
                      "grad_norm": s["grad_norm"], "lr": s["lr"]} for i, s in enumerate(self.steps)]  # fmt: skip
        return out

    def summary(self) -> dict[str, float]:
        """The update's averages: token-weighted over every micro-batch; loss and grad norm over steps."""
        steps = max(1, len(self.steps))
        out = {k: v / max(1, self.tokens) for k, v in self.weighted.items()}
        for key in ("loss", "pg_loss", "grad_norm"):
            out[key] = sum(s[key] for s in self.steps) / steps
        return out

    def step_records(self) -> tuple[dict[str, float], ...]:
        """One record per optimizer step, in order (see the module docstring for the names)."""
        return tuple(step_record(s) for s in self.steps)


def step_record(sums: dict[str, float]) -> dict[str, float]:
    tokens = max(1.0, sums["tokens"])
    return {
        "loss": sums["loss"], "pg_loss": sums["pg_loss"], "kl": sums["kl"] / tokens,
        "clip_ratio": sums["clip_fraction"] / tokens, "clip_ratio_low": sums["clip_low_fraction"] / tokens,
        "clip_ratio_high": sums["clip_high_fraction"] / tokens, "ratio_mean": sums["ratio_mean"] / tokens,
        "entropy": sums["neg_logp"] / tokens, "completion_length": sums["tokens"] / max(1.0, sums["rows"]),
        "grad_norm": sums["grad_norm"], "learning_rate": sums["lr"],
        **weight_record(sums),
    }  # fmt: skip


def weight_record(sums: dict[str, float]) -> dict[str, float]:
    """A step's importance-sampling figures; none when the step corrected nothing."""
    if not sums.get("is_count"):
        return {}
    return {"is_ratio_min": -sums["is_neg_min"], "is_ratio_mean": sums["is_sum"] / sums["is_count"],
            "is_ratio_max": sums["is_max"], "logp_diff_mean": sums["diff_sum"] / max(1.0, sums["diff_tokens"]),
            "logp_diff_max": sums["diff_max"]}  # fmt: skip
