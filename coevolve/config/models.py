"""Config sections read by the stages (each stage's cache key includes the sections it reads).

Frozen pydantic models: a docstring per field, unknown keys rejected. The root model that assembles
them is `CoevolveConfig` below; YAML loading and `--set` overrides live in `flows/config.py`.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, field_validator, model_validator

from coevolve.config.evolution import (
    AbstractConfig,
    EvolveConfig,
    ExploreConfig,
    MergeConfig,
    SignalsConfig,
    VerifyConfig,
)
from coevolve.config.section import Section
from coevolve.config.teacher import (
    PolicyTeacherConfig,
    TeacherConfig,
    _key_variable,
)
from coevolve.config.train import LOSS_TYPES, MAX_LORA_SCALE, TrainConfig, check_lora_scale  # noqa: F401


class ModelConfig(Section):
    name: str = "smollm2-135m"
    """Policy model: `smollm2-135m` (bundled), `tiny-random-llama` (tests), a local HF dir or a hub id."""
    dtype: str = "float32"
    """Weights dtype for training and generation (`float32`, `bfloat16`)."""
    device: str = "cpu"
    """Torch device of the in-process engine and trainer."""
    generation_batch_size: int = Field(16, ge=1, le=65_536)
    """Most sequences generated together in one forward batch."""
    servers: list[str] = Field(default_factory=list, max_length=1024)
    """OpenAI-compatible inference servers (base URLs with `/v1`; `coevolve engine serve`) that generate for
    the policy, round-robin; empty = the in-process transformers engine. After each update the servers load
    its checkpoint (they must be able to read the run's directory): the LoRA adapter with
    `train.lora_rank` > 0 (any vLLM server with runtime LoRA updating), else the full weights (servers
    started by `coevolve engine serve`, whose worker extension reloads a checkpoint in place)."""
    served_name: str | None = None
    """The name the servers serve the base model under (default: `name`)."""
    api_key_env: str | None = None
    """Environment variable holding a bearer key for `servers` (unset: no key is sent). A key only ever goes
    over https or to a loopback address (never through a proxy). Only names matching `API_KEY_ENV` (upper
    case, ending in `_API_KEY`): a config cannot send another secret of the environment (`GITHUB_TOKEN`,
    `AWS_SECRET_ACCESS_KEY`, ...) to a server."""

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in {"float32", "bfloat16", "float16"}:
            raise ValueError("must be one of float32, bfloat16, float16")
        return value

    _key_env = field_validator("api_key_env")(_key_variable)


class EnvConfig(Section):
    name: str = "toolworld"
    """Environment name for `envs.make` (see `coevolve env list`)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword options of the environment's constructor (e.g. seed, split sizes, step caps)."""


class DatasetConfig(Section):
    seed_split: str | None = "train"
    """Environment split that seeds D_0; None = no seed tasks (D_0 from exploration only)."""
    max_tasks: int | None = Field(None, ge=1, le=1_000_000)
    """Use at most this many seed tasks (a seeded sample); None = all."""
    sample_seed: int | None = None
    """Seeds the sample of `max_tasks` seed tasks; None: the run's seed (`run.seed`), so seeds differ in D_0
    too. A fixed value gives every run of an experiment one D_0, so its seeds differ only in sampling and
    training (the coverage regime)."""
    bootstrap_tasks: int = Field(0, ge=0, le=1_000_000)
    """Add up to N tasks to D_0 by unguided teacher exploration -> triples -> abstract -> verify in round 0,
    the evolution stages run before the first rollout (paper N = 100); 0 = off."""
    bootstrap_split: str = "train"
    """Split whose tasks' initial states (worlds) the unguided exploration starts from; their user
    turns and solutions are not shown to the teacher."""
    bootstrap_worlds: int = Field(16, ge=1, le=1_000_000)
    """Worlds of `bootstrap_split` the unguided exploration explores (a seeded sample) to find the N tasks."""

    @model_validator(mode="after")
    def _has_tasks(self) -> DatasetConfig:
        if self.seed_split is None and self.bootstrap_tasks == 0:
            raise ValueError("D_0 would be empty: set seed_split or bootstrap_tasks > 0")
        return self


class RolloutConfig(Section):
    tasks_per_round: int = Field(4, ge=1, le=100_000)
    """Tasks sampled from the current dataset version each round (without replacement)."""
    newest_share: float = Field(0.0, ge=0.0, le=1.0)
    """Extension, not the paper's: share of `tasks_per_round` (rounded up) reserved for the tasks the latest
    data evolution admitted, drawn by weight among them; the rest by weight from the whole dataset. 0 = one
    weighted draw. With a few draws per round from hundreds of tasks, an admitted task can otherwise go
    untrained."""
    k: int = Field(8, ge=1, le=1024)
    """Rollouts per task (the GRPO group size)."""
    temperature: float = Field(0.8, ge=0.01, le=10.0)
    """Sampling temperature; the trainer scales logits by the same 1/T (at least 0.01: near 0, 1/T overflows
    the log-probs; greedy decoding is `eval.greedy`)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling; keep 1.0 so sampled tokens follow the distribution the trainer scores."""
    max_new_tokens: int = Field(96, ge=1, le=131_072)
    """Cap on tokens per model reply."""
    max_replies: int = Field(8, ge=1, le=10_000)
    """Cap on model replies per episode (over all turns)."""
    max_context_tokens: int = Field(2048, ge=64, le=1_048_576)
    """An episode whose context would exceed this ends with finish = 'context'."""
    max_staleness: int = Field(0, ge=0, le=1_000)
    """Extension, not the paper's (prime-rl's `max_off_policy_steps`, SkyRL's `max_staleness_steps`): round
    r's rollouts sample from the policy after round r-1-s, so round r+1's rollout runs while round r's
    update trains (in a second copy of the model). 0 = synchronous: the policy after round r-1, the
    paper's on-policy GRPO."""


class EvalConfig(Section):
    every: int = Field(1, ge=0, le=10_000)
    """Evaluate the policy after every E-th round's update (0 = never)."""
    baseline: bool = True
    """Also evaluate the initial policy in round 0 (stage `baseline`)."""
    splits: tuple[str, ...] = ("test",)
    """Held-out environment splits to score; the dataset never contains them."""
    max_tasks: int | None = Field(None, ge=1, le=1_000_000)
    """Score at most this many tasks per split (a fixed seeded sample); None = all."""
    greedy: bool = True
    """Greedy decoding for evaluation (else the rollout temperature)."""
    samples: int = Field(1, ge=1, le=1024)
    """Episodes per task; a task's success is their mean, an estimate of the policy's success probability
    that moves by degrees where one greedy episode flips. More than one needs `greedy: false`."""
    max_live_episodes: int = Field(256, ge=1, le=1_000_000)
    """Most evaluation episodes in flight at once (tasks x samples of every split can be many): each holds
    an environment and, in the in-process engine, its KV cache between replies; the rest start as others
    end. Bounds memory; what else changes is which episodes share a forward batch (and so, when sampling,
    the random draws)."""

    @model_validator(mode="after")
    def _samples_need_sampling(self) -> EvalConfig:
        if self.samples > 1 and self.greedy:
            raise ValueError(f"eval.samples: {self.samples} greedy episodes of a task are one episode repeated; "
                             f"set eval.greedy: false")
        return self


class RunSection(Section):
    name: str = "run"
    """Default run name (the CLI's `--run` wins)."""
    seed: int = 0
    """Seed of task sampling, rollouts and evaluation sampling."""
    rounds: int = Field(2, ge=1, le=10_000)
    """Total number of rounds the run should have; re-running with more continues."""


class RuntimeSection(Section):
    ray_address: str | None = None
    """Run environment episodes in Ray actors of the cluster at this address (`host:port`, or `auto`),
    one environment per actor (`envs.ray_workers`); unset: in the driver process. Not part of any cache
    key: where episodes run does not change what they produce."""
    ray_actor_cpus: float = Field(0.0, ge=0.0, le=1024.0)
    """CPUs each environment actor reserves in Ray's scheduler (0: as many actors as episodes)."""


class StorageSection(Section):
    root: str = "runs"
    """Storage root for runs and the DuckDB catalog (env COEVOLVE_HOME overrides the default)."""


class TrackingSection(Section):
    report_to: tuple[Literal["tensorboard", "trackio", "wandb", "all"], ...] = ()
    """Experiment trackers that receive the run's metrics under TRL's names (`flows.tracking`): per optimizer
    step on a global step axis (`train/loss`, `train/grad_norm`, `train/learning_rate`, `train/clip_ratio`,
    `train/kl`, `train/entropy`, `train/completion_length`), per round (`train/success`,
    `train/frac_groups_with_signal`, `eval/<split>/success`, `evolution/*`), and the hparams once. Each
    round is logged once. `tensorboard` and `wandb` (offline unless `WANDB_MODE` says otherwise) write under
    the run's folder (`run=<run>/tracking/<tracker>/`), `trackio` to its own store (project `coevolve`);
    `all`: every one installed; empty or `none`: no tracker, as TRL's `report_to`. Each needs its extra
    (`pip install 'coevolve[tensorboard]'`, `[trackio]`, `[wandb]`). Not part of any cache key."""

    @field_validator("report_to", mode="before")
    @classmethod
    def _one_or_none(cls, value: Any) -> Any:
        if isinstance(value, str):  # `report_to: tensorboard`, `report_to: none`
            return () if value == "none" else (value,)
        return value


class WarmStartSection(Section):
    """Supervised starts built once before a run (`stages.warm_start.build`) and cached by content in the model
    cache (`~/.cache/coevolve/warm-start/`), for a policy too small to act or teach zero-shot. Every run
    of the same model, environment and settings reuses them; `model.name` and the teacher become their
    `warm-start/<key>` names in the run's saved config."""

    policy_tasks: int = Field(0, ge=0, le=1_000_000)
    """Fine-tune `model.name` on reference solutions (and the teacher's abstraction reply) of this many
    fresh training-family tasks, never a task of the run's splits, and start the run from it (0: off)."""
    teacher_tasks: int = Field(0, ge=0, le=1_000_000)
    """Give the run a teacher of its own (`teacher.type: local`, sampling as `teacher` says): the policy's
    start fine-tuned on abstraction, reflection and exploration replies for this many other fresh tasks
    (0: the teacher as configured). Needs `teacher.type: policy`."""
    epochs: int = Field(2, ge=1, le=1000)
    """Passes over the examples, for both starts."""
    lr: float = Field(5e-5, gt=0.0, le=1.0)
    """AdamW learning rate, for both starts."""
    lora_rank: int = Field(0, ge=0, le=65_536)
    """0: fine-tune every weight. Else train a LoRA adapter of this rank on every linear layer and merge it
    (`stages.warm_start.adapters`): a start small enough to ship (`configs/warm-starts/`), merged in seconds
    instead of trained. Use a larger `lr` than for a full fine-tune."""
    lora_alpha: float = Field(32.0, gt=0.0, le=MAX_LORA_SCALE * 65_536)
    """LoRA scaling numerator (the adapter's update is scaled by lora_alpha / lora_rank, at most
    `MAX_LORA_SCALE` = 64)."""
    teacher_named_tool_examples: bool = False
    """Extension, not the paper's: the teacher's start also trains on examples where an `unused` signal names
    a tool of the training families that the task's own solution does not call, and the exploration lists
    its app, then calls it (`stages.warm_start.teacher_examples.named_tool_samples`). A tool no training
    task calls (the coverage gap's) is never named. Enters the teacher start's key only when true, so the
    starts built and shipped without it keep their names."""

    @model_validator(mode="after")
    def _sane_lora_scale(self) -> WarmStartSection:
        check_lora_scale("warm_start", self.lora_rank, self.lora_alpha)
        return self


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
    """When the data evolves (`every: 0` = the GRPO baseline)."""
    signals: SignalsConfig = SignalsConfig()
    """Weakness signals."""
    explore: ExploreConfig = ExploreConfig()
    """Signal-guided re-exploration."""
    abstract: AbstractConfig = AbstractConfig()
    """Abstraction of explored calls into candidate tasks."""
    verify: VerifyConfig = VerifyConfig()
    """Environment verification of candidates."""
    merge: MergeConfig = MergeConfig()
    """Dataset merge."""
    teacher: TeacherConfig = PolicyTeacherConfig()
    """The LLM that reflects, explores and abstracts tasks (`type: policy` or `type: openai`)."""
    storage: StorageSection = StorageSection()
    """Where runs are written."""
    runtime: RuntimeSection = RuntimeSection()
    """Where environment episodes run (in process, or Ray actors)."""
    tracking: TrackingSection = TrackingSection()
    """Experiment trackers that receive each round's metrics (`report_to`; default none)."""
    warm_start: WarmStartSection = WarmStartSection()
    """Supervised starts of the policy and of a teacher of its own, built once (default: none)."""

    @property
    def gap_families(self) -> tuple[str, ...]:
        """The coverage gap: the environment option `gap_families` (families no training data shows)."""
        return tuple(self.env.options.get("gap_families") or ())

    @property
    def d0_sample_seed(self) -> int:
        """The seed of D_0's sample of seed tasks (`dataset.sample_seed`, else `run.seed`)."""
        return self.run.seed if self.dataset.sample_seed is None else self.dataset.sample_seed

    @model_validator(mode="after")
    def _oracle_gap_needs_a_gap(self) -> CoevolveConfig:
        if self.evolve.curriculum == "oracle-gap" and not self.gap_families:
            raise ValueError("evolve.curriculum: oracle-gap draws the coverage gap's families; name them in "
                             "env.options.gap_families")
        gap_splits = {"gap-validation", "gap-test"}
        for field, split in (("dataset.seed_split", self.dataset.seed_split),
                             ("dataset.bootstrap_split", self.dataset.bootstrap_split)):  # fmt: skip
            if split in gap_splits:
                raise ValueError(f"{field}: {split} holds the coverage gap, which no training data may show")
        return self

    @model_validator(mode="after")
    def _teacher_start_needs_a_policy_teacher(self) -> CoevolveConfig:
        built = self.teacher.type == "local" and self.teacher.model.startswith("warm-start/")
        if self.warm_start.teacher_tasks and self.teacher.type != "policy" and not built:
            raise ValueError(f"warm_start.teacher_tasks builds the teacher from the policy's start; it needs "
                             f"teacher.type: policy, not {self.teacher.type}")
        return self

    @model_validator(mode="after")
    def _staleness_fits(self) -> CoevolveConfig:
        stale = self.rollout.max_staleness
        if stale and self.model.servers:
            raise ValueError("rollout.max_staleness > 0 generates in a second in-process model; the servers in "
                             "model.servers serve one version at a time: set it to 0 or drop model.servers")
        if stale and self.train.vllm_importance_sampling_correction is None:
            raise ValueError("rollout.max_staleness > 0 trains on samples of an older policy: say whether the "
                             "update corrects for it, train.vllm_importance_sampling_correction: true (as prime-rl "
                             "and SkyRL do) or false (uncorrected)")
        if stale >= self.train.keep_checkpoints:
            raise ValueError(f"rollout.max_staleness: {stale} samples from the checkpoint {stale + 1} rounds "
                             f"back; train.keep_checkpoints must keep it (at least {stale + 1})")
        return self

    def value(self, path: str) -> Any:
        """The value at a dotted path: a section (`rollout`) or one field (`run.seed`)."""
        node: Any = self
        for part in path.split("."):
            if not isinstance(node, BaseModel) or part not in type(node).model_fields:
                raise KeyError(f"no config field {path!r}")
            node = getattr(node, part)
        return node

    def select(self, paths: tuple[str, ...] | list[str]) -> dict[str, Any]:
        """JSON-able values of some dotted paths (sections or fields), for cache keys."""
        return {path: _jsonable(self.value(path)) for path in paths}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _jsonable(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
