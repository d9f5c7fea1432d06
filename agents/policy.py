"""The policy held in memory across rounds: model, tokenizer, engine, optimizer and its version.

On CPU the engine generates with the very model object that grpo_update trains, so nothing is reloaded
between rounds. A policy version is a name: `base-<hash>` for the initial weights, then the id the
update of round r wrote into its manifest. When a stage needs a version the memory does not hold (a
resumed run, a re-run stage), `ensure` loads that version's checkpoint.

With `model.servers` the engine is an `OpenAIEngine` over those inference servers: the model here only
trains, and `publish` hands each update's checkpoint to the servers (a LoRA adapter hot-loaded, or the
full weights loaded in place with `train.lora_rank: 0`), so rollouts always sample from the version
being trained (the rollout stage refuses samples of any other version).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.config import CoevolveConfig, ModelConfig, TrainConfig
from coevolve.core import content_hash

EngineFactory = Callable[["Policy"], Any]
"""Builds the inference engine of a policy whose model and tokenizer are loaded (`Policy.load_base`)."""


def base_version(model: ModelConfig) -> str:
    return f"base-{content_hash({'name': model.name, 'dtype': model.dtype}, length=12)}"


@dataclass
class Policy:
    """Lazily loaded policy; `ensure(version, checkpoint)` makes memory hold that version."""

    model_config: ModelConfig
    train_config: TrainConfig
    model: Any = None
    tokenizer: Any = None
    engine: Any = None
    optimizer: Any = None
    reference: Any = None
    version: str = ""
    engine_factory: EngineFactory | None = None
    """Builds the engine once the model is loaded; None: `HfEngine` in process, `OpenAIEngine` with servers."""
    _chat: Any = field(default=None, repr=False)

    def load_base(self) -> None:
        from coevolve.llm.hf_engine import HfEngine
        from coevolve.llm.models import load_model

        cfg = self.model_config
        self.model, self.tokenizer = load_model(cfg.name, dtype=cfg.dtype, device=cfg.device)
        if self.train_config.lora_rank:
            self.model = with_lora_adapter(self.model, self.train_config)
        self.version = base_version(cfg)
        if self.engine_factory is not None:
            self.engine = self.engine_factory(self)
        elif cfg.servers:
            self.engine = self._served_engine()
        else:
            self.engine = HfEngine(
                self.model, self.tokenizer, batch_size=cfg.generation_batch_size, version=self.version
            )
        self.optimizer = None

    def _served_engine(self) -> Any:
        """The policy's inference servers, serving the base weights: their adapter, if any, dropped; for a
        full-weight policy, the base checkpoint loaded on any server that serves other weights."""
        from coevolve.llm.models import resolve_model
        from coevolve.llm.openai_engine import OpenAIEngine

        cfg = self.model_config
        engine = self.engine
        if not isinstance(engine, OpenAIEngine):
            engine = OpenAIEngine(cfg.servers, cfg.served_name or cfg.name, tokenizer=self.tokenizer,
                                  token_ids=True, api_key_env=cfg.api_key_env, version=self.version)  # fmt: skip
        engine.use_base(None if self.train_config.lora_rank else resolve_model(cfg.name), version=self.version)
        engine.version = self.version
        return engine

    def publish(self, version: str, checkpoint: Path) -> None:
        """The in-memory weights are now `version` (saved in `checkpoint`): make the engine serve them."""
        if self.model_config.servers:
            self.engine.update_weights(checkpoint, version=version)
        self.version = self.engine.version = version

    @property
    def chat(self) -> Any:
        if self._chat is None:
            from coevolve.llm.chat import ChatFormat

            self._chat = ChatFormat(self.tokenizer)
        return self._chat

    def ensure(self, version: str, checkpoint: Path | None) -> None:
        """Make the in-memory weights (and optimizer state) those of `version`."""
        if self.model is None:
            self.load_base()
        if version == self.version:
            return
        if checkpoint is None:
            if version != base_version(self.model_config):
                raise RuntimeError(f"no checkpoint recorded for policy version {version}")
            self.load_base()
            return
        self._load_checkpoint(version, checkpoint)

    def _load_checkpoint(self, version: str, checkpoint: Path) -> None:
        load_checkpoint_weights(self.model, checkpoint, version, lora=bool(self.train_config.lora_rank))
        self.make_optimizer()
        from coevolve.rl.checkpoint import load_optimizer_state

        with checkpoint_errors(checkpoint, version):
            load_optimizer_state(self.optimizer, checkpoint)
        self.publish(version, checkpoint)

    def make_optimizer(self) -> Any:
        if self.optimizer is None:
            from coevolve.rl.update import make_optimizer

            self.optimizer = make_optimizer(self.model, self.train_config.lr, self.train_config.weight_decay)
        return self.optimizer

    def reference_model(self) -> Any:
        """A frozen copy of the base weights for the KL term (built on first use); None with LoRA, whose
        reference is the model with its adapter disabled."""
        if self.train_config.lora_rank:
            return None
        if self.reference is None:
            from coevolve.llm.models import load_model

            cfg = self.model_config
            self.reference, _ = load_model(cfg.name, dtype=cfg.dtype, device=cfg.device)
            self.reference.eval().requires_grad_(False)
        return self.reference


def load_checkpoint_weights(model: Any, checkpoint: Path, version: str, *, lora: bool) -> None:
    """Load the weights grpo_update saved for `version` in `checkpoint` into `model` (`rl.checkpoint`); a
    missing or corrupt checkpoint is one `ArtifactError` naming the file and the command that rebuilds it."""
    from coevolve.rl.checkpoint import load_weights

    with checkpoint_errors(checkpoint, version):
        load_weights(model, checkpoint, lora=lora)


@contextmanager
def checkpoint_errors(checkpoint: Path, version: str) -> Iterator[None]:
    """Turn a missing or unloadable checkpoint into one `ArtifactError` that says how to rebuild it."""
    from coevolve.rl.checkpoint import CorruptCheckpointError
    from coevolve.storage.layout import root_option
    from coevolve.storage.parquet import ArtifactError

    found = re.search(r"run=([^/]+)/checkpoints/round=(\d+)", str(checkpoint))
    root = root_option(Path(str(checkpoint)[: found.start()] or ".")) if found else ""  # the runs folder
    rebuild = (f"rebuild it with `coevolve stage grpo_update --run {found.group(1)} --round {found.group(2)} "
               f"--force{root}`" if found else "re-run the grpo_update stage that wrote it with --force")  # fmt: skip
    try:
        yield
    except FileNotFoundError as exc:
        raise ArtifactError(f"checkpoint of policy {version} is missing or incomplete ({exc}; pruned or "
                            f"deleted): {rebuild}") from None  # fmt: skip
    except CorruptCheckpointError as exc:
        raise ArtifactError(f"{exc}: the checkpoint of policy {version} is corrupt; {rebuild}") from None


def with_lora_adapter(model: Any, train: TrainConfig) -> Any:
    """`model` wrapped in a fresh, trainable LoRA adapter on every linear layer (the base is frozen)."""
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=train.lora_rank, lora_alpha=train.lora_alpha, lora_dropout=0.0,
                        target_modules="all-linear", task_type="CAUSAL_LM")  # fmt: skip
    with torch.random.fork_rng():  # the adapter's initial weights are the same in every process
        torch.manual_seed(0)
        return get_peft_model(model, config)


def update_hyperparams(config: CoevolveConfig, round_: int) -> Any:
    """The GRPO update's settings from the run config (`rl.update.UpdateHyperparams`) for the update of round
    `round_`, whose first optimizer step is the run's step `round_ x epochs x mini_batches` (the lr schedule's
    clock, `rl.schedule`)."""
    from coevolve.rl.is_correction import ISCorrection
    from coevolve.rl.schedule import make_schedule
    from coevolve.rl.update import UpdateHyperparams

    t = config.train
    correction = (ISCorrection(t.vllm_importance_sampling_mode, t.vllm_importance_sampling_cap)
                  if t.importance_sampling_on(served=bool(config.model.servers)) else None)  # fmt: skip
    steps_per_round = t.epochs * t.mini_batches
    total = None if t.schedule_rounds is None else t.schedule_rounds * steps_per_round
    schedule = make_schedule(t.lr_scheduler_type, warmup_steps=t.warmup_steps, warmup_ratio=t.warmup_ratio,
                             total_steps=total)  # fmt: skip
    return UpdateHyperparams(
        lr=t.lr, clip_low=t.clip_low, clip_high=t.clip_high, beta=t.beta, micro_batch_size=t.micro_batch_size,
        epochs=t.epochs, mini_batches=t.mini_batches, max_grad_norm=t.max_grad_norm,
        temperature=config.rollout.temperature, weight_decay=t.weight_decay,
        shared_prefix=t.shared_prefix, loss_normalization=t.loss_normalization, fixed_tokens=t.fixed_tokens,
        scale_rewards=t.scale_rewards, drop_zero_std_groups=t.drop_zero_std_groups,
        lr_schedule=schedule, first_step=round_ * steps_per_round, is_correction=correction,
    )
