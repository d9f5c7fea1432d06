"""Supervised warm start: fine-tune a policy on reference solutions before reinforcement learning.

The paper's policies (Qwen3-4B and up) already solve part of their training tasks, which is what gives
GRPO groups with both outcomes and lets CoEvolve's boundary and forgetting signals fire. SmolLM2-135M
solves almost no tool-world task zero-shot (benchmarks/RESULTS.md), so the learning benchmark first
fine-tunes it briefly on reference solutions of *other* instances of the training families: every arm
then starts from the same partly competent checkpoint.

A reference episode is played through the real environment and rendered exactly as a rollout would be
(`stages.agent_loop`): the prompt with tools and demonstrations, then per user turn one reply per
reference call (so each call sees the previous result) and a final answer stating the turn's required
values (`envs.replay.final_answer`). Only the assistant replies carry loss (`SampleBatch` masks).

    from rl.warm_start import WarmStart, reference_samples, warm_start
    samples = reference_samples(env, chat, tasks)
    losses = warm_start(model, samples, WarmStart(epochs=2))
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

from coevolve.envs.base import Environment, Task
from coevolve.envs.replay import final_answer
from coevolve.llm.chat import ChatFormat
from coevolve.llm.toolcalls import render_tool_call
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
    """Also teach the teacher's abstraction reply (`stages.warm_start.abstraction_sample`) on the same tasks:
    an in-process teacher is the policy itself, and SmolLM2 otherwise copies the prompt's example."""

    def __post_init__(self) -> None:
        for name in ("tasks", "epochs", "batch_size", "micro_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"warm start: {name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"warm start: lr must be > 0, got {self.lr}")


def reference_sample(env: Environment, chat: ChatFormat, task: Task) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of `task`'s reference solution played through `env` as the agent."""
    obs = env.reset(task)
    demos = list(getattr(env, "demonstrations", list)())
    ids = chat.prompt_ids(obs.messages, tools=obs.tools, demonstrations=demos)
    mask = [0] * len(ids)
    solution = task.solution or []
    for turn in range(len(task.turns)):
        calls = solution[turn] if turn < len(solution) else []
        for reply in [render_tool_call(call) for call in calls] + [final_answer(task, turn)]:
            reply_ids = chat.encode(reply) + [chat.end_of_turn_id]
            ids += reply_ids
            mask += [1] * len(reply_ids)
            result = env.step(reply)
            if result.done:
                return ids, mask
            more = chat.continuation_ids(result.messages, last_token_id=chat.end_of_turn_id).ids
            ids += more
            mask += [0] * len(more)
    return ids, mask


def reference_samples(env: Environment, chat: ChatFormat, tasks: Sequence[Task]) -> SampleBatch:
    """One reference episode per task, as a `SampleBatch` (rewards 1); a group is one task family.

    Tasks of one family share their prompt up to the user's request (same tools, same demonstrations),
    so `warm_start` runs a family's rows together and encodes that prefix once (`rl.shared_prefix`).
    """
    return as_batch([reference_sample(env, chat, task) for task in tasks], [task.family for task in tasks])


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
