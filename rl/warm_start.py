"""Supervised warm start: fine-tune a policy on reference episodes before reinforcement learning.

The paper's policies (Qwen3-4B and up) already solve part of their training tasks, which is what gives
GRPO groups with both outcomes and lets CoEvolve's boundary and forgetting signals fire. A small model
that solves almost none can first be fine-tuned briefly on reference episodes (`agents.reference`) of
*other* instances of the training families, so every run starts from the same partly competent
checkpoint. Loss: the mean token NLL of the assistant replies (`SampleBatch` masks).

    samples = reference_samples(env, chat, tasks)                 # agents.reference
    losses = warm_start(model, samples, WarmStart(epochs=2))
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass

import torch

from coevolve.rl.batch import SampleBatch, micro_batches
from coevolve.rl.update import micro_batch_logprobs


@dataclass(frozen=True)
class WarmStart:
    """Settings of the supervised warm start."""

    tasks: int = 48
    """How many reference episodes (tasks of the training families, disjoint from the run's splits)."""
    epochs: int = 2
    lr: float = 5e-5
    batch_size: int = 8
    """Episodes per optimizer step."""
    micro_batch_size: int = 8
    seed: int = 0
    teacher: bool = True
    """Also teach the teacher's abstraction reply (`stages.warm_start.teacher_examples.abstraction_sample`) on the same tasks:
    an in-process teacher is the policy itself, and SmolLM2 otherwise copies the prompt's example."""
    lora_rank: int = 0
    """0: fine-tune every weight. Else train a LoRA adapter of this rank on every linear layer and merge
    it (`stages.warm_start.adapters`): a start of a few MB that can be shipped and merged in seconds."""
    lora_alpha: float = 32.0
    """LoRA scaling numerator (the adapter's update is scaled by lora_alpha / lora_rank)."""

    def __post_init__(self) -> None:
        for name in ("tasks", "epochs", "batch_size", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"warm start: {name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"warm start: lr must be > 0, got {self.lr}")
        if self.lora_rank < 0 or not self.lora_alpha > 0:
            raise ValueError(f"warm start: lora_rank must be >= 0 and lora_alpha > 0, got {self.lora_rank}, "
                             f"{self.lora_alpha}")

    def key_fields(self) -> dict:
        """The settings that name a start built with them: the LoRA fields only when LoRA is on, so a full
        fine-tune keeps the name it had before they existed."""
        fields = asdict(self)
        if not self.lora_rank:
            del fields["lora_rank"], fields["lora_alpha"]
        return fields


def as_batch(rows: Sequence[tuple[list[int], list[int]]], groups: Sequence[Hashable]) -> SampleBatch:
    """(ids, mask) rows as a `SampleBatch` of rewards 1; rows with equal `groups` keys train together."""
    index = {key: i for i, key in enumerate(dict.fromkeys(groups))}
    return SampleBatch(
        input_ids=[ids for ids, _ in rows],
        loss_mask=[mask for _, mask in rows],
        rewards=[1.0] * len(rows),
        group_ids=[index[key] for key in groups],
    )


def _steps(samples: SampleBatch, settings: WarmStart, generator: random.Random) -> list[list[list[int]]]:
    """One epoch: optimizer steps of about `batch_size` rows made of whole groups in random order, each
    step a list of micro-batches holding rows of one group."""
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(samples.group_ids):
        groups.setdefault(group, []).append(row)
    order = list(groups.values())
    generator.shuffle(order)
    steps: list[list[list[int]]] = [[]]
    for rows in order:
        if sum(map(len, steps[-1])) >= settings.batch_size:
            steps.append([])
        steps[-1] += micro_batches(samples.lengths, rows, settings.micro_batch_size)
    return steps


def warm_start(
    model: torch.nn.Module, samples: SampleBatch, settings: WarmStart,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[float]:  # fmt: skip
    """Minimise the mean token NLL of the policy tokens of `samples`; returns the loss of every step."""
    generator = random.Random(settings.seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
    model.train()
    losses = []
    steps = [step for _ in range(settings.epochs) for step in _steps(samples, settings, generator)]
    for step in steps:
        tokens = samples.policy_tokens([row for micro in step for row in micro])
        total = 0.0
        for micro in step:
            logprobs = micro_batch_logprobs(model, samples, micro, temperature=1.0, shared_prefix=True)
            mask = samples.pad(micro).loss_mask.to(logprobs.device)
            loss = -(logprobs * mask).sum() / tokens
            loss.backward()
            total += float(loss.detach())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total)
        if progress:
            progress(len(losses), len(steps), total)
    model.eval()
    return losses
