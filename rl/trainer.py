"""The one update path: a round's GRPO update is `train_round(job, state)`, run by N >= 1 processes.

The grpo_update stage (`stages/grpo_update/stage.py`) resolves what it declares into an `UpdateJob`: the
rollout's `samples` files with the sha256 its cache key hashed, the policy the round starts from (version
and checkpoint), the model to build, the checkpoint to write, and the update's settings as one typed
`UpdateHyperparams` (`rl.hyperparams`, derived from the config once, by the stage). The job is all an
update reads; `train_round` reads the samples files itself and refuses one that is not the recorded one.

- N = 1, the flow's process: the state is the policy held in memory (`agents.policy.Policy.train_state`:
  the model the engine generates with, the optimizer kept across rounds), so nothing is reloaded.
- N > 1, `accelerate launch` (`executors.accelerate_update`): each process builds the state from the job
  (`load_train_state`: weights and optimizer state of the starting checkpoint, sharded with FSDP when the
  accelerate config asks, `rl.sharding`) and calls the same `train_round` with its `Accelerator`;
  `rl.update.grpo_update` splits the micro-batches and sums the gradients, process 0 writes the checkpoint.

    job = UpdateJob(round=0, hyperparams=hp, model=ModelSpec("tiny-random-llama"), samples=files,
                    start=("base-...", None), checkpoint=run_dir / "checkpoints/round=0")
    result = train_round(job, load_train_state(job, device="cpu"))
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coevolve.config import ModelConfig, TrainConfig
from coevolve.file_hashes import file_sha256
from coevolve.rl.batch import SampleBatch
from coevolve.rl.hyperparams import UpdateHyperparams
from coevolve.rl.update import UpdateResult

Progress = Callable[[int], AbstractContextManager[Callable[[int], object]]]
"""total -> a context yielding `advance(n)` (the run context's progress bar with its description bound)."""


@dataclass(frozen=True)
class ModelSpec:
    """The policy model a process builds: its name (resolved by `llm.models`), dtype, device, and the LoRA
    adapter it trains (rank 0: all weights)."""

    name: str
    dtype: str = "float32"
    device: str = "cpu"
    lora_rank: int = 0
    lora_alpha: float = 32.0

    @classmethod
    def of(cls, model: ModelConfig, train: TrainConfig) -> ModelSpec:
        return cls(model.name, model.dtype, model.device, train.lora_rank, train.lora_alpha)


@dataclass(frozen=True)
class SamplesFile:
    """One round's `samples` artifact file and the sha256 its manifest records (what the cache key hashed)."""

    path: Path
    sha256: str


@dataclass(frozen=True)
class UpdateJob:
    """Everything one round's update reads, resolved by the grpo_update stage from its declared inputs."""

    round: int
    hyperparams: UpdateHyperparams
    model: ModelSpec
    samples: tuple[SamplesFile, ...]
    start: tuple[str, Path | None]
    """The policy the update starts from: its version and checkpoint (None: the base weights)."""
    checkpoint: Path
    """Where the updated weights, tokenizer and optimizer state go."""

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "hyperparams": self.hyperparams.to_json(), "model": asdict(self.model),
                "samples": [[str(f.path), f.sha256] for f in self.samples],
                "start": [self.start[0], None if self.start[1] is None else str(self.start[1])],
                "checkpoint": str(self.checkpoint)}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UpdateJob:
        version, start = data["start"]
        return cls(data["round"], UpdateHyperparams.from_json(data["hyperparams"]), ModelSpec(**data["model"]),
                   tuple(SamplesFile(Path(p), sha) for p, sha in data["samples"]),
                   (version, None if start is None else Path(start)), Path(data["checkpoint"]))  # fmt: skip


@dataclass
class TrainState:
    """What an update trains and writes: the model, its tokenizer, its optimizer, and the frozen KL reference
    (None: `beta` is 0, or a LoRA model, whose reference is its base with the adapter disabled)."""

    model: Any
    tokenizer: Any
    optimizer: Any
    reference: Any = None


def with_lora_adapter(model: Any, rank: int, alpha: float) -> Any:
    """`model` wrapped in a fresh, trainable LoRA adapter on every linear layer (the base is frozen)."""
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear",
                        task_type="CAUSAL_LM")  # fmt: skip
    with torch.random.fork_rng():  # the adapter's initial weights are the same in every process
        torch.manual_seed(0)
        return get_peft_model(model, config)


def frozen_reference(model: ModelSpec) -> Any:
    """A frozen copy of the base weights, the KL term's reference for full fine-tuning."""
    from coevolve.llm.models import load_model

    reference, _ = load_model(model.name, dtype=model.dtype, device=model.device)
    return reference.eval().requires_grad_(False)


def load_train_state(job: UpdateJob, *, device: str, sharding: dict[str, bool] | None = None) -> TrainState:
    """A fresh process's state for `job`: the base model (with its adapter), the starting checkpoint's weights,
    sharded when `sharding` says (`rl.sharding.shard_model` keywords), the optimizer with that checkpoint's
    state (fresh if it was dropped), and the reference when the update needs one."""
    from coevolve.llm.models import load_model
    from coevolve.rl.checkpoint import load_optimizer_state, load_weights, read_optimizer_state
    from coevolve.rl.sharding import load_full_optimizer_state, shard_model
    from coevolve.rl.update import make_optimizer

    spec, hp, previous = job.model, job.hyperparams, job.start[1]
    model, tokenizer = load_model(spec.name, dtype=spec.dtype, device=device)
    if spec.lora_rank:
        model = with_lora_adapter(model, spec.lora_rank, spec.lora_alpha)
    if previous is not None:
        load_weights(model, previous, lora=bool(spec.lora_rank))
    if sharding is not None:
        shard_model(model, **sharding)
    optimizer = make_optimizer(model, hp.lr, hp.weight_decay)
    if previous is not None and sharding is not None:
        load_full_optimizer_state(model, optimizer, read_optimizer_state(previous))
    elif previous is not None:
        load_optimizer_state(optimizer, previous)
    needs_reference = hp.beta > 0 and not spec.lora_rank
    reference = frozen_reference(ModelSpec(spec.name, spec.dtype, device)) if needs_reference else None
    return TrainState(model, tokenizer, optimizer, reference)


def read_samples(files: tuple[SamplesFile, ...]) -> SampleBatch:
    """The training rows of `files` (`rl.batch.samples_batch`), each refused unless it holds the bytes its
    manifest recorded: the update reads what its cache key names, nothing else."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from coevolve.rl.batch import samples_batch

    tables = []
    for file in files:
        found = file_sha256(file.path)
        if found != file.sha256:
            raise RuntimeError(f"samples file {file.path} is not the one its manifest records (sha256 "
                               f"{found[:12]}, recorded {file.sha256[:12]}); run its rollout stage again")  # fmt: skip
        tables.append(pq.read_table(file.path, page_checksum_verification=True))
    return samples_batch(pa.concat_tables(tables))


def train_round(job: UpdateJob, state: TrainState, *, accelerator: Any | None = None,
                progress: Progress | None = None) -> UpdateResult:  # fmt: skip
    """One round's update of `state` on the job's samples (`rl.update.grpo_update`), then its checkpoint:
    written by this process, or with an `accelerator` by process 0 (a sharded state gathered there first,
    with every process taking part). Every process of a launch calls it with the same job. Raises
    `rl.divergence.DivergenceError` before anything is saved."""
    from coevolve.rl.checkpoint import save_checkpoint
    from coevolve.rl.sharding import full_state, is_sharded
    from coevolve.rl.update import grpo_update, progress_total

    batch, hp = read_samples(job.samples), job.hyperparams
    bar = nullcontext(None) if progress is None else progress(progress_total(batch, hp))
    with bar as advance:
        result = grpo_update(state.model, state.reference, state.optimizer, batch, hp, progress=advance,
                             accelerator=accelerator)  # fmt: skip
    gathered = full_state(state.model, state.optimizer) if is_sharded(state.model) else None
    if accelerator is None or accelerator.is_main_process:
        save_checkpoint(state.model, state.tokenizer, state.optimizer, job.checkpoint, state=gathered)
    return result
