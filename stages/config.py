"""Config sections read by the stages (each stage's cache key includes the sections it reads).

Frozen pydantic models: a docstring per field, unknown keys rejected. The root model that assembles
them is `CoevolveConfig` below; YAML loading and `--set` overrides live in `flows/config.py`.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ModelConfig(Section):
    name: str = "smollm2-135m"
    """Policy model: `smollm2-135m` (bundled), `tiny-random-llama` (tests), a local HF dir or a hub id."""
    dtype: str = "float32"
    """Weights dtype for training and generation (`float32`, `bfloat16`)."""
    device: str = "cpu"
    """Torch device of the in-process engine and trainer."""
    generation_batch_size: int = Field(16, ge=1)
    """Most sequences generated together in one forward batch."""

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in {"float32", "bfloat16", "float16"}:
            raise ValueError("must be one of float32, bfloat16, float16")
        return value


class EnvConfig(Section):
    name: str = "toolworld"
    """Environment name for `envs.make` (see `coevolve env list`)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of the environment's constructor (e.g. seed, split sizes, step caps)."""


class DatasetConfig(Section):
    seed_split: str = "train"
    """Environment split that seeds D_0."""
    max_tasks: int | None = Field(None, ge=1)
    """Use at most this many seed tasks (a seeded sample); None = all."""


class RolloutConfig(Section):
    tasks_per_round: int = Field(4, ge=1)
    """Tasks sampled from the current dataset version each round (without replacement)."""
    k: int = Field(8, ge=1)
    """Rollouts per task (the GRPO group size)."""
    temperature: float = Field(0.8, gt=0.0)
    """Sampling temperature; the trainer scales logits by the same 1/T."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling; keep 1.0 so sampled tokens follow the distribution the trainer scores."""
    max_new_tokens: int = Field(96, ge=1)
    """Cap on tokens per model reply."""
    max_replies: int = Field(8, ge=1)
    """Cap on model replies per episode (over all turns)."""
    max_context_tokens: int = Field(2048, ge=64)
    """An episode whose context would exceed this ends with finish = 'context'."""


class EvalConfig(Section):
    every: int = Field(1, ge=0)
    """Evaluate the policy after every E-th round's update (0 = never)."""
    baseline: bool = True
    """Also evaluate the initial policy in round 0 (stage `baseline`)."""
    splits: tuple[str, ...] = ("test",)
    """Held-out environment splits to score; the dataset never contains them."""
    max_tasks: int | None = Field(None, ge=1)
    """Score at most this many tasks per split (a fixed seeded sample); None = all."""
    greedy: bool = True
    """Greedy decoding for evaluation (else the rollout temperature)."""


class EvolveConfig(Section):
    every: int = Field(0, ge=0)
    """Run the data-evolution phases every F rounds; 0 = plain GRPO on the seed dataset."""


class TrainConfig(Section):
    lr: float = Field(2e-5, gt=0.0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    clip_low: float = Field(0.2, ge=0.0)
    """PPO clip epsilon below 1 (ratio >= 1 - clip_low)."""
    clip_high: float = Field(0.28, ge=0.0)
    """PPO clip epsilon above 1 (ratio <= 1 + clip_high)."""
    beta: float = Field(0.0, ge=0.0)
    """Weight of the k3 KL penalty to the frozen reference policy (0 = no reference model)."""
    micro_batch_size: int = Field(4, ge=1)
    """Sequences per forward/backward pass; gradients accumulate over micro-batches."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per epoch over the round's samples."""
    epochs: int = Field(1, ge=1)
    """Passes over the round's samples."""
    max_grad_norm: float = Field(1.0, gt=0.0)
    """Gradient-norm clip."""
    keep_checkpoints: int = Field(2, ge=1)
    """Most recent round checkpoints kept on disk (older ones are pruned)."""


class RunSection(Section):
    name: str = "run"
    """Default run name (the CLI's `--run` wins)."""
    seed: int = 0
    """Seed of task sampling, rollouts and evaluation sampling."""
    rounds: int = Field(2, ge=1)
    """Total number of rounds the run should have; re-running with more continues."""


class StorageSection(Section):
    root: str = "runs"
    """Storage root for runs and the DuckDB catalog (env COEVOLVE_HOME overrides the default)."""


class CoevolveConfig(Section):
    """Everything a run reads. Saved resolved into the run; each stage's cache key hashes its sections."""

    run: RunSection = RunSection()
    """Run name, seed, number of rounds."""
    model: ModelConfig = ModelConfig()
    """The policy model."""
    env: EnvConfig = EnvConfig()
    """The environment."""
    dataset: DatasetConfig = DatasetConfig()
    """How D_0 is seeded."""
    rollout: RolloutConfig = RolloutConfig()
    """Rollouts per round."""
    train: TrainConfig = TrainConfig()
    """The GRPO update."""
    eval: EvalConfig = EvalConfig()
    """Held-out evaluation."""
    evolve: EvolveConfig = EvolveConfig()
    """Data evolution (0 = the GRPO baseline)."""
    storage: StorageSection = StorageSection()
    """Where runs are written."""

    def section(self, *names: str) -> dict[str, Any]:
        """JSON-able dump of some sections, for cache keys."""
        return {name: getattr(self, name).model_dump(mode="json") for name in names}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
