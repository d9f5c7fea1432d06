"""One GRPO policy update over a round's rollouts (the `grpo_update` stage calls this).

Steps of `grpo_update`:

1. Advantages: rewards centred within each group and scaled (by the group's std unless ``scale_rewards``
   says otherwise; `rl.advantages.group_advantages`).
2. Rows that cannot contribute are dropped: rows without policy tokens, and rows whose advantage is
   exactly 0 (their surrogate and its gradient vanish). When ``beta > 0`` zero-advantage rows are
   *kept*: the KL term still pulls them towards the reference, and the token normaliser then counts
   every policy token of the group, as in the paper's objective; ``drop_zero_std_groups`` drops the rows of
   a group whose rewards are all equal then too (DAPO's dynamic-sampling filter, without the resampling).
   Dropped rows leave every normaliser (fewer tokens, groups or rows to divide by). With no row left,
   nothing runs and no optimizer step is taken (AdamW would otherwise still move weights through momentum
   and weight decay).
3. The remaining rows are split into ``mini_batches`` mini-batches along group boundaries (a group is
   never split, so token-level normalisation is over whole groups), each cut into micro-batches of
   at most ``micro_batch_size`` rows. With ``shared_prefix`` (the default) a micro-batch holds rows of
   one group and every log-prob pass encodes their common prompt once (`rl.shared_prefix`); otherwise
   micro-batches mix groups, sorted by length so that padding is small.
4. Old log-probs are recomputed by the policy itself under ``no_grad`` before the first gradient step,
   with exactly the micro-batches used for training: same kernels, same padding, so the ratio is 1 on
   the first step and there is no engine/trainer numeric drift. With one epoch the weights cannot change
   before the first mini-batch's step, so its old log-probs *are* that step's own forward, detached: the
   pass runs only over the later mini-batches (none with one mini-batch, the default, where it would be a
   quarter of the update's compute). With ``is_correction`` (a server sampled) each token's surrogate loss is
   weighed by these old log-probs against the engine's (`rl.is_correction`). Reference log-probs come from
   ``ref_model`` (or, for a peft model without ``ref_model``, the model with its adapter disabled).
5. ``epochs`` passes over the mini-batches; each mini-batch is one optimizer step, gradients
   accumulated over its micro-batches with the loss normalised over the mini-batch (its policy-token
   count, or per group or per row: ``loss_normalization``, `rl.plan.row_divisors`), then grad-norm
   clipping and ``optimizer.step()``.
6. Divergence guard: a non-finite loss or gradient norm stops the update before its optimizer step, and
   non-finite weights right after one (`DivergenceError`, naming the step and the likely cause). Nothing
   downstream would notice otherwise: a NaN policy is checkpointed, samples garbage, and the run goes on.

Data-parallel (``accelerator``, an `accelerate.Accelerator` over several processes; `rl.trainer`):
every process holds the whole batch and the same weights, and takes micro-batches ``rank, rank + world,
...`` of each mini-batch; its losses are still divided by the *whole* mini-batch's token count, and the
gradients are summed over processes (one all-reduce) before clipping, so every process takes exactly the
one-process optimizer step and the weights stay identical. Metrics are summed over processes too.
With sharded weights (`rl.sharding`, FSDP2) the reduction is FSDP's own (an average, times the number
of processes), and a process with fewer micro-batches in a mini-batch runs extra passes with a zero loss
(`Shard.padding`): every forward and backward pass gathers weights from all processes, so all must run
the same number.

The learning rate: with ``lr_schedule`` (`rl.schedule`) every optimizer step's rate is ``lr`` times the
schedule's factor at the step's index in the run (``first_step`` + its index in this update), set on the
optimizer just before the step, so it never depends on what the optimizer held. Without one (a constant rate)
the rate belongs to the optimizer (build it with `make_optimizer`, or schedule it outside); ``lr`` and
``weight_decay`` are then only what `make_optimizer` uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from coevolve.rl.advantages import group_advantages
from coevolve.rl.batch import SampleBatch
from coevolve.rl.divergence import Guard, Seen, finite_weights, lora_scale
from coevolve.rl.hyperparams import UpdateHyperparams
from coevolve.rl.is_correction import importance_weights, weight_stats
from coevolve.rl.logprobs import token_logprobs
from coevolve.rl.loss import grpo_loss
from coevolve.rl.plan import Plan, Shard, plan_update, shard_plan, trainable_rows
from coevolve.rl.sharding import is_sharded
from coevolve.rl.shared_prefix import shared_prefix_logprobs, supports_shared_prefix
from coevolve.rl.update_metrics import MetricsSum


@dataclass(frozen=True)
class UpdateResult:
    """Metrics of one `grpo_update` (one row of the `updates` artifact).

    loss/pg_loss: mean over optimizer steps of the mini-batch loss; kl, clip and ratio stats:
    token-weighted means over every micro-batch of every epoch; grad_norm: mean pre-clip norm;
    tokens: policy tokens of the trained rows (counted once, not per epoch); samples: rows in the
    batch; trained_samples: rows used in the gradient; groups_dropped: groups none of whose rows is trained
    (no signal and no KL term, or `drop_zero_std_groups`); lr: the rate of the update's first optimizer step
    (scheduled, or the optimizer's); steps: each optimizer step's loss, KL, clip ratios, entropy estimate,
    completion length, grad norm and learning rate (`rl.update_metrics.step_record`).
    """

    loss: float
    pg_loss: float
    kl: float
    clip_fraction: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float
    grad_norm: float
    lr: float
    tokens: int
    samples: int
    trained_samples: int
    groups: int
    groups_with_signal: int
    groups_dropped: int
    optimizer_steps: int
    seconds: float
    steps: tuple[dict[str, float], ...] = ()  # one record per optimizer step (`rl.update_metrics`)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.0) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (all of them, or only the adapter for peft models)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def progress_total(batch: SampleBatch, hp: UpdateHyperparams) -> int:
    """Sum of the ``advance`` values `grpo_update` will pass to ``progress`` (rows x epochs)."""
    return hp.epochs * len(_trainable_rows(batch, _advantages(batch, hp), hp))


def _advantages(batch: SampleBatch, hp: UpdateHyperparams) -> Tensor:
    rewards = torch.tensor(batch.rewards, dtype=torch.float32)  # [N]
    group_ids = torch.tensor(batch.group_ids, dtype=torch.long)  # [N]
    return group_advantages(rewards, group_ids, scale=hp.scale_rewards)  # [N]


def _trainable_rows(batch: SampleBatch, adv: Tensor, hp: UpdateHyperparams) -> list[int]:
    return trainable_rows(batch, adv, hp.beta, drop_zero_std=hp.drop_zero_std_groups)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _is_peft(model: nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def micro_batch_logprobs(
    model: nn.Module, batch: SampleBatch, micro: list[int], *, temperature: float, shared_prefix: bool
) -> Tensor:
    """Log-probs ``[b, T]`` of the rows ``micro``, right-padded like ``batch.pad(micro)``, at the
    positions their loss masks score (the vocabulary projection is skipped everywhere else; 0 there).

    ``shared_prefix``: encode the rows' common prefix once (`rl.shared_prefix`) when that saves work.
    """
    if shared_prefix:
        rows = [batch.input_ids[i] for i in micro]
        scored = [batch.loss_mask[i] for i in micro]
        lp = shared_prefix_logprobs(model, rows, temperature=temperature, score_rows=scored)
        if lp is not None:
            return lp
    padded = batch.pad(micro).to(_device(model))
    return token_logprobs(model, padded.input_ids, padded.attention_mask, temperature=temperature,
                          score_mask=padded.loss_mask)


@torch.no_grad()
def _fixed_logprobs(
    model: nn.Module, batch: SampleBatch, plan: Plan, temperature: float, shared_prefix: bool
) -> list[list[Tensor]]:
    """Log-probs ``[b, T]`` of every micro-batch of ``plan`` under a frozen view of ``model``."""
    was_training = model.training
    model.eval()
    out = [
        [micro_batch_logprobs(model, batch, micro, temperature=temperature, shared_prefix=shared_prefix)
         for micro in mini]
        for mini in plan
    ]  # fmt: skip
    model.train(was_training)
    return out


def _reference_logprobs(
    model: nn.Module, ref_model: nn.Module | None, batch: SampleBatch, plan: Plan, hp: UpdateHyperparams
) -> list[list[Tensor]] | None:
    if hp.beta == 0:
        return None
    if ref_model is not None:
        shared = hp.shared_prefix and supports_shared_prefix(ref_model)
        ref = _fixed_logprobs(ref_model, batch, plan, hp.temperature, shared)
        device = _device(model)
        return [[t.to(device) for t in mini] for mini in ref]
    with model.disable_adapter():  # peft: the base model is the reference
        return _fixed_logprobs(
            model, batch, plan, hp.temperature, hp.shared_prefix and supports_shared_prefix(model)
        )


def _optimizer_step(model: nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float | None,
                    guard: Guard, step: int, accelerator: Any | None) -> float:
    """Clip, step and check: a non-finite gradient norm (the same on every process) stops before the step,
    non-finite weights right after it."""
    params = [p for p in model.parameters() if p.requires_grad]
    limit = max_grad_norm if max_grad_norm and max_grad_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, limit)
    grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # sharded: a DTensor
    guard.check(step, "grad_norm", grad_norm)
    optimizer.step()
    if not finite_weights(model, accelerator):
        raise guard.error(step, "weights")
    return grad_norm


def _mini_batch_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: SampleBatch,
    mini: Shard,
    adv: Tensor,
    old: list[Tensor] | None,
    ref: list[Tensor] | None,
    hp: UpdateHyperparams,
    acc: MetricsSum,
    progress: Callable[[int], object] | None,
    shared_prefix: bool,
    accelerator: Any | None,
    guard: Guard,
) -> None:
    """One optimizer step: gradients accumulated over this process's micro-batches of a mini-batch.

    Every micro-batch loss is divided by the policy-token count of the whole mini-batch, so the
    accumulated gradient is that of the token-level-normalised mini-batch loss. In one process a non-finite
    loss stops before the step; over several, each holds only its own micro-batches' loss, so the gradient
    norm, which a NaN loss makes NaN after the sum and which every process shares, stops them all together.
    """
    step = len(acc.steps) + 1
    device = _device(model)
    optimizer.zero_grad(set_to_none=True)
    for u, micro in enumerate(mini.micro):
        padded = batch.pad(micro).to(device)
        lp = micro_batch_logprobs(model, batch, micro, temperature=hp.temperature, shared_prefix=shared_prefix)
        old_lp, weights = lp.detach() if old is None else old[u], None
        if hp.is_correction is not None:  # the engine's samples weighed by trainer / engine (as TRL)
            engine = batch.pad_engine_logprobs(micro).to(device)
            weights = importance_weights(old_lp, engine, padded.loss_mask, hp.is_correction)
            acc.add_weights(weight_stats(weights, old_lp, engine, padded.loss_mask))
        loss, metrics = grpo_loss(
            lp, old_lp, None if ref is None else ref[u], adv[micro].to(device), padded.loss_mask,
            clip_low=hp.clip_low, clip_high=hp.clip_high, beta=hp.beta, num_tokens=mini.normaliser(micro),
            is_weights=weights,
        )  # fmt: skip
        loss.backward()
        neg_logp = -torch.where(padded.loss_mask.bool(), lp.detach(), 0.0).sum()  # the entropy estimate's sum
        acc.add(metrics, float(neg_logp), len(micro))
        if progress is not None:
            progress(len(micro))
    for micro in mini.padding:  # sharded weights: as many passes as the busiest process, adding nothing
        lp = micro_batch_logprobs(model, batch, micro, temperature=hp.temperature, shared_prefix=shared_prefix)
        (lp.sum() * 0.0).backward()
    if accelerator is not None and is_sharded(model):  # FSDP averaged them: the sum, as below
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(accelerator.num_processes)
    elif accelerator is not None:
        _sum_gradients(model, accelerator)
    if accelerator is None:
        guard.check(step, "loss", acc.step_loss)
    if hp.lr_schedule is not None:
        for group in optimizer.param_groups:
            group["lr"] = hp.step_lr(step - 1)
    lr = float(optimizer.param_groups[0]["lr"])  # the rate this step uses
    acc.end_step(_optimizer_step(model, optimizer, hp.max_grad_norm, guard, step, accelerator), lr)


def _sum_gradients(model: nn.Module, accelerator: Any) -> None:
    """Replace every trainable parameter's gradient by its sum over processes (one flat all-reduce)."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    total = accelerator.reduce(torch.cat([g.flatten() for g in grads]), reduction="sum")
    offset = 0
    for p in params:
        p.grad = total[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def grpo_update(
    model: nn.Module,
    ref_model: nn.Module | None,
    optimizer: torch.optim.Optimizer,
    batch: SampleBatch,
    hp: UpdateHyperparams,
    *,
    progress: Callable[[int], object] | None = None,
    accelerator: Any | None = None,
) -> UpdateResult:
    """Run one GRPO update of ``model`` on ``batch``; see the module docstring for the steps.

    ``progress(advance)`` is called after each micro-batch with its number of rows; the total over
    the update is `progress_total` (this process's share with an ``accelerator``). The model's
    train/eval mode is restored afterwards. ``accelerator``: data-parallel over its processes (every
    process passes the same weights, optimizer state and batch; see the module docstring). Raises
    `DivergenceError` at the first non-finite loss, gradient norm or weights.
    """
    start = time.perf_counter()
    if hp.beta > 0 and ref_model is None and not _is_peft(model):
        raise ValueError(
            "grpo_update: beta > 0 needs a reference policy: pass ref_model, or a peft model "
            "(its base model, adapter disabled, is then the reference)"
        )
    if hp.is_correction is not None and batch.engine_logprobs is None:
        raise ValueError("grpo_update: is_correction needs the engine's log-probs (SampleBatch.engine_logprobs)")
    adv = _advantages(batch, hp)  # [N]
    rows = _trainable_rows(batch, adv, hp)
    shared = hp.shared_prefix and supports_shared_prefix(model)
    plan = plan_update(batch, rows, hp.mini_batches, hp.micro_batch_size, by_group=shared) if rows else []
    if accelerator is None:
        shards = shard_plan(batch, plan, normalization=hp.loss_normalization, fixed_tokens=hp.fixed_tokens)
    else:
        shards = shard_plan(batch, plan, accelerator.process_index, accelerator.num_processes,
                            lockstep=is_sharded(model), normalization=hp.loss_normalization,
                            fixed_tokens=hp.fixed_tokens)  # fmt: skip
    local_plan = [shard.micro + shard.padding for shard in shards]
    group_ids = torch.tensor(batch.group_ids, dtype=torch.long)
    acc = MetricsSum()
    first_lr = hp.step_lr(0) if hp.lr_schedule is not None else float(optimizer.param_groups[0]["lr"])

    if plan:
        # one epoch: the first mini-batch steps from the weights its old log-probs would be computed with,
        # so its own forward, detached, is them; only the later mini-batches need the no-grad pass
        own_first = hp.epochs == 1
        needed = local_plan[1:] if own_first else local_plan
        fixed = _fixed_logprobs(model, batch, needed, hp.temperature, shared) if needed else []
        old: list[list[Tensor] | None] = [None, *fixed] if own_first else fixed
        ref = _reference_logprobs(model, ref_model, batch, local_plan, hp)
        was_training = model.training
        model.train()
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        seen = Seen(lr=first_lr, dtype=dtype, lora_scale=lora_scale(model),
                    advantages_finite=bool(torch.isfinite(adv).all()))  # fmt: skip
        guard = Guard(hp.epochs * len(shards), seen, start_finite=lambda: finite_weights(model, accelerator))
        try:
            for _ in range(hp.epochs):
                for m, shard in enumerate(shards):
                    mini_ref = None if ref is None else ref[m]
                    _mini_batch_step(model, optimizer, batch, shard, adv, old[m], mini_ref, hp, acc, progress,
                                     shared, accelerator, guard)  # fmt: skip
        finally:  # a DivergenceError too leaves no gradients behind
            optimizer.zero_grad(set_to_none=True)
            model.train(was_training)
    if accelerator is not None:
        acc = acc.summed_over(accelerator)

    signal = group_ids[adv != 0].unique()
    trained = {batch.group_ids[i] for i in rows}
    return UpdateResult(
        **acc.summary(),
        lr=first_lr,
        tokens=batch.policy_tokens(rows),
        samples=len(batch),
        trained_samples=len(rows),
        groups=int(group_ids.unique().numel()),
        groups_with_signal=int(signal.numel()),
        groups_dropped=len(set(batch.group_ids) - trained),
        optimizer_steps=len(acc.steps),
        seconds=time.perf_counter() - start,
        steps=acc.step_records(),
    )
