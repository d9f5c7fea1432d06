"""How one update cuts a round's samples into optimizer steps and passes, and deals them to processes.

Rows that cannot contribute are left out (`trainable_rows`); the rest are split into mini-batches along
group boundaries (a group is never split, so token-level normalisation is over whole groups), each cut
into micro-batches (`plan_update`). Over several processes, each takes micro-batches `rank, rank + world,
...` of every mini-batch (`shard_plan`), padded to the busiest process's count when weights are sharded.

Each optimizer step's loss is normalised over its mini-batch (`LossNormalization`, `row_divisors`), computed
from the whole mini-batch so that every process and micro-batch divides by the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from coevolve.rl.batch import SampleBatch, micro_batches

Plan = list[list[list[int]]]  # mini-batches -> micro-batches -> row indices
LossNormalization = Literal["batch_tokens", "group_tokens", "sequence", "fixed_tokens"]
"""What a step's summed token losses are divided by (`train.loss_normalization`, `row_divisors`)."""


def trainable_rows(
    batch: SampleBatch, advantages: Tensor, beta: float, *, drop_zero_std: bool = False
) -> list[int]:
    """Rows that contribute to the loss: some policy tokens, and a signal or a KL term. ``drop_zero_std``
    (`train.drop_zero_std_groups`): no row of a group whose rewards are all equal, even with a KL term."""
    flat = zero_std_groups(batch) if drop_zero_std else set()
    return [
        i for i in range(len(batch))
        if any(batch.loss_mask[i]) and (beta > 0 or float(advantages[i]) != 0.0)
        and batch.group_ids[i] not in flat
    ]  # fmt: skip


def zero_std_groups(batch: SampleBatch) -> set[int]:
    """Groups whose rewards are all equal (a single row too): no learning signal, whatever the scaling."""
    rewards: dict[int, set[float]] = {}
    for group, reward in zip(batch.group_ids, batch.rewards, strict=True):
        rewards.setdefault(group, set()).add(float(reward))
    return {group for group, values in rewards.items() if len(values) == 1}


def plan_update(
    batch: SampleBatch, rows: list[int], mini_batches: int, micro_batch_size: int, *, by_group: bool = False
) -> Plan:
    """Split ``rows`` into up to ``mini_batches`` groups-aligned mini-batches of micro-batches.

    ``by_group``: every micro-batch holds rows of a single group (for shared-prefix passes).
    """
    groups = list(dict.fromkeys(batch.group_ids[i] for i in rows))  # first-appearance order
    parts = max(1, min(mini_batches, len(groups)))
    bounds = [round(k * len(groups) / parts) for k in range(parts + 1)]
    plan = []
    for k in range(parts):
        chunk = groups[bounds[k] : bounds[k + 1]]
        mini = [i for i in rows if batch.group_ids[i] in chunk]
        if not mini:
            continue
        pieces = [[i for i in mini if batch.group_ids[i] == g] for g in chunk] if by_group else [mini]
        plan.append(
            [micro for piece in pieces for micro in micro_batches(batch.lengths, piece, micro_batch_size)]
        )
    return plan


def row_divisors(batch: SampleBatch, rows: list[int], normalization: LossNormalization,
                 fixed_tokens: int | None = None) -> dict[int, float]:  # fmt: skip
    """Divisor of each row's token losses in the mini-batch ``rows``; empty for `batch_tokens` (every row's is
    the mini-batch's policy-token count N, passed as one scalar). TRL's `loss_type` names in brackets.

    - ``batch_tokens`` (dapo): N, all policy tokens of the mini-batch (DAPO's token-level loss; this project's
      first).
    - ``group_tokens`` (none): ``N_g * G``, its group's policy tokens times the groups in the mini-batch: each
      group's loss is normalised over its own tokens (the paper's formula, 1 / sum_k |tau_k| over the K
      rollouts) and the groups are averaged. Equals ``batch_tokens`` when the mini-batch is one group.
    - ``sequence`` (grpo): ``|tau_i| * B``, its own policy tokens times the rows: the mean over rows of each
      row's token mean (the original GRPO's, DeepSeekMath).
    - ``fixed_tokens`` (dr_grpo): ``fixed_tokens * B``, a constant times the rows: token losses summed, never
      divided by a length (Dr. GRPO's; its constant is TRL's `max_completion_length`).
    """
    if normalization == "batch_tokens":
        return {}
    if normalization == "fixed_tokens":
        if fixed_tokens is None:
            raise ValueError("row_divisors: fixed_tokens normalisation needs fixed_tokens")
        return {i: float(fixed_tokens * len(rows)) for i in rows}
    if normalization == "sequence":
        return {i: float(batch.policy_tokens([i]) * len(rows)) for i in rows}
    groups: dict[int, list[int]] = {}
    for i in rows:
        groups.setdefault(batch.group_ids[i], []).append(i)
    per_group = {g: float(batch.policy_tokens(members) * len(groups)) for g, members in groups.items()}
    return {i: per_group[batch.group_ids[i]] for i in rows}


@dataclass(frozen=True)
class Shard:
    """This process's micro-batches of one mini-batch, and the whole mini-batch's policy-token count."""

    micro: list[list[int]]
    num_tokens: int
    padding: list[list[int]] = field(default_factory=list)
    """Micro-batches run with a zero loss, so that every process runs as many passes (sharded weights)."""
    divisors: dict[int, float] = field(default_factory=dict)
    """Each row's own loss divisor (`row_divisors`); empty: `num_tokens` for every row."""

    def normaliser(self, micro: list[int]) -> int | Tensor:
        """What `grpo_loss` divides micro-batch ``micro``'s token losses by: N, or ``[b]`` divisors."""
        if not self.divisors:
            return self.num_tokens
        return torch.tensor([self.divisors[i] for i in micro], dtype=torch.float64)


def shard_plan(batch: SampleBatch, plan: Plan, rank: int = 0, world: int = 1, *, lockstep: bool = False,
               normalization: LossNormalization = "batch_tokens",
               fixed_tokens: int | None = None) -> list[Shard]:  # fmt: skip
    """Micro-batches ``rank, rank + world, ...`` of every mini-batch (possibly none); with `lockstep`, padded
    with copies of the mini-batch's first micro-batch up to the busiest process's count. Loss divisors are
    the whole mini-batch's (`row_divisors`)."""
    shards = []
    for mini in plan:
        mine = mini[rank::world]
        padding = [mini[0]] * (-(-len(mini) // world) - len(mine)) if lockstep else []
        rows = [i for micro in mini for i in micro]
        divisors = row_divisors(batch, rows, normalization, fixed_tokens)
        shards.append(Shard(mine, batch.policy_tokens(rows), padding, divisors))
    return shards
