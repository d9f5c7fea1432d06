"""Training samples for one GRPO update, and how they are cut into padded micro-batches.

A `SampleBatch` holds plain Python lists (one row per rollout, as read from the round's `samples`
artifact): the full token sequence of the episode, a loss mask that is 1 on the policy's own tokens
(0 on prompt, tool outputs and template tokens), the episode reward and its group (task) id.

`SampleBatch.pad` turns a slice of rows into right-padded tensors; `micro_batches` splits row indices
into micro-batches of at most ``micro_batch_size`` rows, sorted by length so that rows of similar
length share a micro-batch and little compute goes into padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class PaddedRows:
    """Right-padded tensors for some rows of a `SampleBatch`."""

    input_ids: Tensor  # [B, T] int64, pad_token_id after each row's end
    attention_mask: Tensor  # [B, T] int64, 1 on real tokens
    loss_mask: Tensor  # [B, T] float32, 1 on policy tokens

    def to(self, device: torch.device | str) -> PaddedRows:
        return PaddedRows(
            self.input_ids.to(device), self.attention_mask.to(device), self.loss_mask.to(device)
        )


@dataclass(frozen=True)
class SampleBatch:
    """Rollouts of one round: token ids, policy-token mask, reward and group per row.

    ``loss_mask[i][0]`` must be 0: the first token has no context, so it has no log-prob.
    """

    input_ids: list[list[int]]
    loss_mask: list[list[int]]
    rewards: list[float]
    group_ids: list[int]
    engine_logprobs: list[list[float]] | None = None
    """The rollout engine's log-prob of each token as it sampled it (0 off policy tokens); None: not known."""

    def __post_init__(self) -> None:
        n = len(self.input_ids)
        if self.engine_logprobs is not None and len(self.engine_logprobs) != n:
            raise ValueError(f"SampleBatch: engine_logprobs has {len(self.engine_logprobs)} rows, input_ids {n}")
        if not (len(self.loss_mask) == len(self.rewards) == len(self.group_ids) == n):
            raise ValueError(
                "SampleBatch: input_ids, loss_mask, rewards and group_ids need one entry per row, got "
                f"{n}, {len(self.loss_mask)}, {len(self.rewards)}, {len(self.group_ids)}"
            )
        for i, (ids, mask) in enumerate(zip(self.input_ids, self.loss_mask, strict=True)):
            if len(ids) != len(mask):
                raise ValueError(f"SampleBatch: row {i} has {len(ids)} tokens but {len(mask)} mask entries")
            if not ids:
                raise ValueError(f"SampleBatch: row {i} is empty")
            if mask[0]:
                raise ValueError(
                    f"SampleBatch: row {i} has loss_mask[0] = 1; the first token has no log-prob"
                )
            if self.engine_logprobs is not None and len(self.engine_logprobs[i]) != len(ids):
                raise ValueError(f"SampleBatch: row {i} has {len(ids)} tokens but "
                                 f"{len(self.engine_logprobs[i])} engine log-probs")

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]

    def policy_tokens(self, rows: Sequence[int]) -> int:
        """Number of policy (loss) tokens in ``rows``."""
        return sum(sum(1 for m in self.loss_mask[i] if m) for i in rows)

    def pad(self, rows: Sequence[int], *, pad_token_id: int = 0) -> PaddedRows:
        """Right-pad ``rows`` to their longest length."""
        width = max(len(self.input_ids[i]) for i in rows)
        ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        loss = torch.zeros((len(rows), width), dtype=torch.float32)
        for r, i in enumerate(rows):
            n = len(self.input_ids[i])
            ids[r, :n] = torch.tensor(self.input_ids[i], dtype=torch.long)
            attention[r, :n] = 1
            loss[r, :n] = torch.tensor(self.loss_mask[i], dtype=torch.float32).clamp(0, 1)
        return PaddedRows(ids, attention, loss)

    def pad_engine_logprobs(self, rows: Sequence[int]) -> Tensor:
        """``[len(rows), T]`` float32 engine log-probs of ``rows``, right-padded with 0 like `pad`."""
        if self.engine_logprobs is None:
            raise ValueError("SampleBatch.pad_engine_logprobs: the batch has no engine log-probs")
        width = max(len(self.input_ids[i]) for i in rows)
        out = torch.zeros((len(rows), width), dtype=torch.float32)
        for r, i in enumerate(rows):
            out[r, : len(self.input_ids[i])] = torch.tensor(self.engine_logprobs[i], dtype=torch.float32)
        return out


def micro_batches(lengths: Sequence[int], rows: Sequence[int], micro_batch_size: int) -> list[list[int]]:
    """Split ``rows`` into chunks of at most ``micro_batch_size``, longest rows first.

    Sorting by length (stable, descending) keeps rows of similar length together, so padding is
    small, and puts the largest micro-batch first so an out-of-memory error shows up immediately.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    ordered = sorted(rows, key=lambda i: -lengths[i])
    return [ordered[s : s + micro_batch_size] for s in range(0, len(ordered), micro_batch_size)]


def group_batch(input_ids: list[list[int]], loss_mask: list[list[int]], rewards: list[float],
                groups: list[str], engine_logprobs: list[list[float]] | None = None) -> SampleBatch:
    """A `SampleBatch` of rows whose groups are named by any hashable key (numbered by first appearance)."""
    index = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    return SampleBatch(input_ids=input_ids, loss_mask=loss_mask, rewards=rewards, group_ids=[index[g] for g in groups],
                       engine_logprobs=engine_logprobs)


def samples_batch(table) -> SampleBatch:
    """The `samples` artifact of a rollout (a pyarrow table) as a `SampleBatch`, one group per `group_id`, with
    the sampler's log-probs (its `logprobs` column) as the engine's."""
    logprobs = table.column("logprobs").to_pylist() if "logprobs" in table.column_names else None
    return group_batch(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist(),
                       table.column("reward").to_pylist(), table.column("group_id").to_pylist(), logprobs)
