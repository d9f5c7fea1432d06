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
from typing import TYPE_CHECKING, Any

from coevolve.config import ModelConfig, TrainConfig
from coevolve.core import content_hash

if TYPE_CHECKING:
    from coevolve.rl.trainer import TrainState

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
            from coevolve.rl.trainer import with_lora_adapter

            self.model = with_lora_adapter(self.model, self.train_config.lora_rank, self.train_config.lora_alpha)
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
            from coevolve.rl.trainer import ModelSpec, frozen_reference

            self.reference = frozen_reference(ModelSpec.of(self.model_config, self.train_config))
        return self.reference

    def train_state(self, beta: float) -> TrainState:
        """What the round's update trains in this process (`rl.trainer.train_round`): the in-memory model the
        engine generates with, the optimizer kept across rounds, and the reference when `beta` > 0."""
        from coevolve.rl.trainer import TrainState

        reference = self.reference_model() if beta > 0 else None
        return TrainState(self.model, self.tokenizer, self.make_optimizer(), reference)


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
