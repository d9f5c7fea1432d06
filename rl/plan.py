"""How one update cuts a round's samples into optimizer steps and passes, and deals them to processes.

Rows that cannot contribute are left out (`trainable_rows`); the rest are split into mini-batches along
group boundaries (a group is never split, so token-level normalisation is over whole groups), each cut
into micro-batches (`plan_update`). Over several processes, each takes micro-batches `rank, rank + world,
...` of every mini-batch (`shard_plan`), padded to the busiest process's count when weights are sharded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from coevolve.rl.batch import SampleBatch, micro_batches

Plan = list[list[list[int]]]  # mini-batches -> micro-batches -> row indices


def trainable_rows(batch: SampleBatch, advantages: Tensor, beta: float) -> list[int]:
    """Rows that contribute to the loss: some policy tokens, and a signal or a KL term."""
    return [
        i for i in range(len(batch)) if any(batch.loss_mask[i]) and (beta > 0 or float(advantages[i]) != 0.0)
    ]


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


@dataclass(frozen=True)
class Shard:
    """This process's micro-batches of one mini-batch, and the whole mini-batch's policy-token count."""

    micro: list[list[int]]
    num_tokens: int
    padding: list[list[int]] = field(default_factory=list)
    """Micro-batches run with a zero loss, so that every process runs as many passes (sharded weights)."""


def shard_plan(batch: SampleBatch, plan: Plan, rank: int = 0, world: int = 1, *, lockstep: bool = False) -> list[Shard]:
    """Micro-batches ``rank, rank + world, ...`` of every mini-batch (possibly none); with `lockstep`, padded
    with copies of the mini-batch's first micro-batch up to the busiest process's count."""
    shards = []
    for mini in plan:
        mine = mini[rank::world]
        padding = [mini[0]] * (-(-len(mini) // world) - len(mine)) if lockstep else []
        shards.append(Shard(mine, batch.policy_tokens([i for micro in mini for i in micro]), padding))
    return shards
