"""The `train` section of the run config: the GRPO update's settings (`rl.update`), with TRL's names
where the meaning is the same."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from coevolve.config.section import Section

MAX_LORA_SCALE = 64.0
"""Largest LoRA scale (`lora_alpha / lora_rank`) a config may set: common choices are 0.5 to 4 (alpha = r or
2r; the shipped configs use 2 and 4). The scale multiplies the adapter's gradient and every step's change of
the weights, so an absurd one overflows the first gradient whatever the learning rate."""

LOSS_TYPES = {"dapo": "batch_tokens", "grpo": "sequence", "dr_grpo": "fixed_tokens"}
"""TRL's `loss_type` values offered, and the `train.loss_normalization` each one is."""


class TrainConfig(Section):
    lr: float = Field(2e-5, gt=0.0, le=1.0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    """AdamW weight decay."""
    clip_low: float = Field(0.2, ge=0.0, le=1.0)
    """PPO clip epsilon below 1 (ratio >= 1 - clip_low); the paper's one epsilon."""
    clip_high: float = Field(0.28, ge=0.0, le=100.0)
    """PPO clip epsilon above 1 (ratio <= 1 + clip_high). Extension, not the paper's, when it differs from
    `clip_low` (the default 0.28 is DAPO's clip-higher); the paper's one epsilon: `clip_high = clip_low`."""
    beta: float = Field(0.0, ge=0.0, le=100.0)
    """Weight of the k3 KL penalty to the frozen reference policy (0 = no reference model; the paper has a
    KL term and gives no weight). Zero-advantage handling, an extension, not the paper's: with 0, rows whose
    advantage is 0 (every row of an all-equal group) are left out of the update and of the loss's token
    counts; the paper's normaliser counts them. With beta > 0 they are kept, as in the paper."""
    loss_normalization: Literal["batch_tokens", "group_tokens", "sequence", "fixed_tokens"] = "batch_tokens"
    """What an optimizer step's summed per-token losses are divided by (`rl.plan.row_divisors`,
    docs/algorithm.md). `batch_tokens` (the default, the numbers of every run so far): every policy token of
    the step's mini-batch, DAPO's token-level loss; not the paper's formula when a mini-batch holds several
    groups. `group_tokens` (the paper's, set by the paper configs): each group by its own policy tokens, 1 /
    sum_k |tau_k| over a task's K rollouts, the groups then averaged. `sequence` (not the paper's: the
    original GRPO's): each row by its own tokens, rows averaged. `fixed_tokens` (not the paper's: Dr. GRPO's):
    each row by `fixed_tokens` times the step's rows, no length in it. The first three agree when every row
    has as many policy tokens and every group as many rows; the first two whenever a mini-batch is one group.
    TRL's `loss_type` sets it under TRL's names (the saved config keeps this field): `dapo` = batch_tokens,
    `grpo` = sequence, `dr_grpo` = fixed_tokens; the paper's group_tokens has no TRL name, and TRL's `bnpo` (a
    micro-batch's tokens) is not offered: the loss would change with micro_batch_size, a memory setting."""
    fixed_tokens: int | None = Field(None, ge=1, le=100_000_000)
    """The constant of `loss_normalization: fixed_tokens` (`loss_type: dr_grpo`), needed there and read
    nowhere else: TRL uses max_completion_length; here the policy tokens an episode can hold fit, e.g.
    rollout.max_replies x rollout.max_new_tokens. Only scales the loss: with AdamW it acts on the clip of
    `max_grad_norm` and little else."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """TRL's `scale_rewards` (`rl.advantages`): what a rollout's reward minus its group's mean is divided by.
    `group` (the default, the paper's): the group's std. Extension, not the paper's: `batch`, the std of every
    reward of the round (PPO Lite), or `none`, nothing (Dr. GRPO: the std weighs a task whose rollouts barely
    differ as much as any other). true and false read as group and none, as in TRL."""
    drop_zero_std_groups: bool = False
    """Extension, not the paper's: leave out every row of a group whose rewards are all equal even when
    beta > 0, KL term and token counts included: DAPO's dynamic-sampling filter, without its resampling (no
    TRL field; TRL logs the share as frac_reward_zero_std). With beta = 0 such rows are left out anyway
    (advantage 0, see `beta`). Dropped rows leave every normaliser, so the groups that stay weigh more; each
    update counts the groups it left out (`groups_dropped`)."""
    lr_scheduler_type: Literal["constant", "linear", "cosine", "constant_with_warmup"] = "constant"
    """TRL's `lr_scheduler_type` (transformers'), over the run's optimizer steps, `epochs x mini_batches` per
    round counted across rounds (`rl.schedule`; a step's rate follows from its index alone, so a resumed run
    uses the rates of an uninterrupted one). `constant` (the default, the paper's: it gives no schedule;
    transformers' default is linear). Extension, not the paper's: `constant_with_warmup`, `linear` and
    `cosine` (to 0 at `schedule_rounds`, and 0 past it)."""
    warmup_steps: int = Field(0, ge=0, le=100_000_000)
    """TRL's `warmup_steps`: the rate rises linearly from 0 (the first step's) to `lr` over this many
    optimizer steps of the run; not with `constant` (use constant_with_warmup). Extension, not the paper's."""
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    """TRL's `warmup_ratio`: the warmup as a share of the schedule's steps (rounded up; needs
    `schedule_rounds`); instead of `warmup_steps`. Extension, not the paper's."""
    schedule_rounds: int | None = Field(None, ge=1, le=10_000)
    """The rounds a `linear` or `cosine` schedule, or a `warmup_ratio`, spans: `schedule_rounds x epochs x
    mini_batches` optimizer steps; usually run.rounds. Not read from run.rounds, which grows when a run is
    continued: the rates of updates already made must not change with it. No TRL name (TRL's horizon,
    max_steps, also ends training)."""
    micro_batch_size: int = Field(4, ge=1, le=65_536)
    """Sequences per forward/backward pass; gradients accumulate over micro-batches."""
    mini_batches: int = Field(1, ge=1, le=65_536)
    """Optimizer steps per epoch over the round's samples (whole groups each). With one step per round
    (`mini_batches: 1`, `epochs: 1`) the PPO ratio is 1 and the clip never acts; the paper gives no number."""
    epochs: int = Field(1, ge=1, le=1000)
    """Passes over the round's samples."""
    max_grad_norm: float = Field(1.0, gt=0.0, le=1e4)
    """Gradient-norm clip."""
    keep_checkpoints: int = Field(2, ge=1, le=10_000)
    """Most recent round checkpoints kept on disk (older ones are pruned)."""
    lora_rank: int = Field(0, ge=0, le=65_536)
    """0 = full fine-tuning; r > 0 trains a LoRA adapter (peft) of rank r on every linear layer, and the KL
    reference is the base model with the adapter disabled (no second model in memory)."""
    lora_alpha: float = Field(32.0, gt=0.0, le=MAX_LORA_SCALE * 65_536)
    """LoRA scaling numerator (the adapter's update is scaled by lora_alpha / lora_rank, at most
    `MAX_LORA_SCALE` = 64)."""
    accelerate_config: str | None = None
    """An accelerate config file (`configs/accelerate/`): the update runs under `accelerate launch` over
    its processes, data-parallel or sharded, each running `rl/trainer.py: train_round`; unset: in the
    flow's process."""
    vllm_importance_sampling_correction: bool | None = None
    """Extension, not the paper's: TRL's `vllm_importance_sampling_correction`, importance sampling that corrects
    for the mismatch between the log-probs the inference engine sampled with (`rollout` samples' `logprobs`) and
    the trainer's own, recomputed before the update (`rl.is_correction`): each policy token's surrogate loss is
    weighed by their ratio, as `vllm_importance_sampling_mode` says. TRL's default is true (and only acts when
    vLLM generates); here unset means on where a server generates (`model.servers` set) and off where the
    trainer itself generates, whose log-probs are the trainer's already: off, the update is exactly the
    uncorrected one."""
    vllm_importance_sampling_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = (
        "sequence_mask")
    """Extension, not the paper's: TRL's `vllm_importance_sampling_mode` (and its default): with the correction on,
    the ratio r = exp(trainer's old log-prob - engine's log-prob) per policy token; `token_truncate` weighs each
    token by min(r, cap), `token_mask` by r, or 0 where r > cap; `sequence_truncate` weighs every token of a row
    by min(R, cap), R the product of its tokens' r, and `sequence_mask` by R, or 0 where R > cap (the row leaves
    the gradient). The KL term is not weighed."""
    vllm_importance_sampling_cap: float = Field(3.0, gt=0.0, le=1e6)
    """Extension, not the paper's: TRL's `vllm_importance_sampling_cap` C (and its default, 3.0): the truncate
    modes clip the ratio from above at C, the mask modes zero it where it is larger than C; no lower bound."""
    shared_prefix: bool = True
    """Encode a group's common prompt once in every log-prob pass (exact; `rl.shared_prefix`). With it a
    micro-batch holds rows of one group, so `micro_batch_size: k` encodes each prompt once per pass."""

    def importance_sampling_on(self, served: bool) -> bool:
        """Whether the engine's samples are corrected (`vllm_importance_sampling_correction`; unset: when
        `served`, a server generates)."""
        return served if self.vllm_importance_sampling_correction is None else self.vllm_importance_sampling_correction

    @property
    def loss_type(self) -> str | None:
        """TRL's `loss_type` of `loss_normalization` (None for the paper's group_tokens: it has no TRL name)."""
        return {v: k for k, v in LOSS_TYPES.items()}.get(self.loss_normalization)

    @model_validator(mode="before")
    @classmethod
    def _trl_values(cls, data: Any) -> Any:
        """TRL's `loss_type`, another way to write `loss_normalization`; TRL's true/false `scale_rewards`."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("scale_rewards"), bool):
            data["scale_rewards"] = "group" if data["scale_rewards"] else "none"
        if "loss_type" not in data:
            return data
        loss_type = data.pop("loss_type")
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"train.loss_type: {loss_type!r} is not offered; one of {', '.join(LOSS_TYPES)} (bnpo "
                             f"would make the loss depend on micro_batch_size; dapo divides by the step's tokens)")
        given = data.setdefault("loss_normalization", LOSS_TYPES[loss_type])
        if given != LOSS_TYPES[loss_type]:
            raise ValueError(f"train.loss_type: {loss_type} is loss_normalization {LOSS_TYPES[loss_type]}, "
                             f"but train.loss_normalization is {given}; set one of them")
        return data

    @model_validator(mode="after")
    def _schedule_and_loss_complete(self) -> TrainConfig:
        if self.loss_normalization == "fixed_tokens" and self.fixed_tokens is None:
            raise ValueError("train.fixed_tokens: loss_normalization fixed_tokens (loss_type dr_grpo) divides by "
                             "it; set it, e.g. to rollout.max_replies x rollout.max_new_tokens")
        check_lora_scale("train", self.lora_rank, self.lora_alpha)
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError("train.warmup_ratio: give warmup_steps or warmup_ratio, not both")
        if self.lr_scheduler_type == "constant" and (self.warmup_steps or self.warmup_ratio):
            raise ValueError("train.lr_scheduler_type: constant has no warmup; use constant_with_warmup")
        spans = self.lr_scheduler_type in ("linear", "cosine") or self.warmup_ratio
        if self.schedule_rounds is None and spans:
            what = f"lr_scheduler_type {self.lr_scheduler_type}" if not self.warmup_ratio else "warmup_ratio"
            raise ValueError(f"train.schedule_rounds: {what} needs the rounds the schedule spans "
                             f"(usually run.rounds)")
        return self


def check_lora_scale(section: str, rank: int, alpha: float) -> None:
    """Raise naming `<section>.lora_alpha` when a LoRA adapter's scale `alpha / rank` passes `MAX_LORA_SCALE`."""
    if rank > 0 and alpha / rank > MAX_LORA_SCALE:
        raise ValueError(f"{section}.lora_alpha: {alpha:g} / lora_rank {rank} scales the adapter by {alpha / rank:g}, "
                         f"more than {MAX_LORA_SCALE:g}; at most lora_alpha {MAX_LORA_SCALE * rank:g} for rank {rank} "
                         f"(usual: lora_alpha = lora_rank or 2 x lora_rank)")
