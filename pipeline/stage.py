"""The stage contract: a stage declares what it reads and which config fields it depends on, once.

    ROLLOUT = StageDef(
        "rollout", version=1,
        config=("rollout", "env", "model", "run.seed"),
        reads={"dataset": Dataset(), "policy": Policy(after_round=-1)},
        compute=roll_out,
    )

The runner (`pipeline.runner`) derives both the cache key and the inputs handed to `compute` from that
declaration: every `Read` names a content hash for the key (`key_part`, cheap: manifests and ids) and a
value for the stage (`load`, only when the stage really runs), and its config is limited to the fields it
declares (`pipeline.declared`), so what its key covers and what it uses cannot drift apart. What is
declared is what is keyed, not every file a stage opens: a `Policy` read keys the policy version and the
stage may load that version's checkpoint (the round's update starts from it), and a launched update
(`executors.accelerate_update`) reads the `samples` artifact that the grpo_update stage declares, from
storage, in its own processes; neither can change without the declared value changing.

Reads:
- `Artifact(stage, artifact, rounds)`: an upstream artifact of the selected rounds (`this_round`,
  `rounds_so_far`, or a stage's own such as `signals.rare_window`); keyed by the files' sha256; loaded as an `Upstream` (tables on demand).
- `Dataset()`: the dataset version D_r the round trains on (`storage.datasets`); keyed by its file's sha256.
- `Policy(after_round=...)` / `EvolutionPolicy()`: the policy version that generates; keyed by its name,
  loaded into memory (`RunContext.use_policy`). (A read declaration, not the model: that is
  `agents.policy.Policy`.)
- `EvolutionTeacher()`: the teacher LLM of the round's evolution; keyed by its version (`agents.teacher.teacher_version`).
- `EnvTasks(splits_field)`: the environment's tasks of the splits a config field names; keyed by their ids.
- `When(field, read)`: `read` only while a config field is set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from coevolve.contracts.phase import Writes
from coevolve.core import content_hash

if TYPE_CHECKING:
    from coevolve.envs.base import Task
    from coevolve.pipeline.context import RunContext
    from coevolve.pipeline.declared import StageContext
    from coevolve.storage.datasets import DatasetVersion

Rounds = Callable[["RunContext", int], list[int]]
"""Which rounds of an upstream stage a read covers, given the context and the reading round."""


def this_round(ctx: RunContext, round_: int) -> list[int]:
    return [round_]


def rounds_so_far(ctx: RunContext, round_: int) -> list[int]:
    """Every round up to and including the reading one."""
    return list(range(round_ + 1))


class Read(Protocol):
    """One declared input of a stage."""

    def key_part(self, ctx: RunContext, round_: int) -> Any:
        """What identifies the input's content (hashes, ids, versions): part of the cache key."""
        ...

    def load(self, ctx: RunContext, round_: int) -> Any:
        """The input itself, handed to the stage's compute function."""
        ...


@dataclass(frozen=True)
class Upstream:
    """An artifact of an upstream stage over some rounds, read on demand."""

    ctx: RunContext
    stage: str
    artifact: str
    rounds: tuple[int, ...]

    def table(self, columns: list[str] | None = None, *, rounds: list[int] | None = None) -> pa.Table:
        """The rows of the given rounds (default: all the read covers), optionally some columns only."""
        tables = [self.ctx.store.read(r, self.stage, self.artifact) for r in (rounds or self.rounds)]
        tables = [t.select(columns) for t in tables] if columns else tables
        if not tables:
            from coevolve.storage.schemas import schema_for

            schema = schema_for(self.artifact)
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        return pa.concat_tables(tables)

    def rows(self, columns: list[str] | None = None, *, rounds: list[int] | None = None) -> list[dict]:
        return self.table(columns, rounds=rounds).to_pylist()

    def files(self) -> list[tuple[Path, str]]:
        """Each round's file and the sha256 the key hashed, for a reader in another process (`rl.trainer`)."""
        return [self.ctx.store.artifact_file(r, self.stage, self.artifact) for r in self.rounds]


@dataclass(frozen=True)
class Artifact:
    """`artifact` written by `stage` in the rounds `rounds` selects (default: the reading round)."""

    stage: str
    artifact: str
    rounds: Rounds = this_round

    def key_part(self, ctx: RunContext, round_: int) -> dict[int, str]:
        return {r: ctx.store.completed(r, self.stage).artifact_sha(self.artifact, self.stage)
                for r in self.rounds(ctx, round_)}  # fmt: skip

    def load(self, ctx: RunContext, round_: int) -> Upstream:
        return Upstream(ctx, self.stage, self.artifact, tuple(self.rounds(ctx, round_)))


@dataclass(frozen=True)
class Dataset:
    """The dataset version round r trains on: the newest `datasets` written before it."""

    def key_part(self, ctx: RunContext, round_: int) -> str:
        return ctx.datasets.version_of(round_).sha256

    def load(self, ctx: RunContext, round_: int) -> DatasetVersion:
        return ctx.datasets.version_of(round_)


@dataclass(frozen=True)
class Policy:
    """The policy after round `round + after_round`'s update (-1 relative: the one the round starts with);
    `base=True`: the initial weights."""

    after_round: int = -1
    base: bool = False
    staleness: str | None = None
    """A config field holding s (`rollout.max_staleness`): the policy s rounds older still (never older than
    the base), held in a model of its own while s > 0 (`RunContext.use_stale_policy`)."""

    def lag(self, ctx: RunContext) -> int:
        return ctx.config.value(self.staleness) if self.staleness else 0

    def policy_round(self, ctx: RunContext, round_: int) -> int:
        return -1 if self.base else max(round_ + self.after_round - self.lag(ctx), -1)

    def key_part(self, ctx: RunContext, round_: int) -> str:
        return ctx.policy_after(self.policy_round(ctx, round_))[0]

    def load(self, ctx: RunContext, round_: int) -> Any:
        if self.lag(ctx):
            return ctx.use_stale_policy(self.policy_round(ctx, round_))
        return ctx.use_policy(self.policy_round(ctx, round_))


@dataclass(frozen=True)
class EvolutionPolicy:
    """The policy the round's data evolution uses (`RunContext.evolution_policy_round`): the one before the
    round's update, or after it with `evolve.verify_after_update`; `base=True`: the initial weights."""

    base: bool = False

    def policy_round(self, ctx: RunContext, round_: int) -> int:
        return -1 if self.base else ctx.evolution_policy_round(round_)

    def key_part(self, ctx: RunContext, round_: int) -> str:
        return ctx.policy_after(self.policy_round(ctx, round_))[0]

    def load(self, ctx: RunContext, round_: int) -> Any:
        return ctx.use_policy(self.policy_round(ctx, round_))


@dataclass(frozen=True)
class EvolutionTeacher:
    """The teacher LLM of the round's evolution (`base=True`: a policy teacher is the initial policy); loads an
    `agents.teacher.Teacher`."""

    base: bool = False

    def _policy_round(self, ctx: RunContext, round_: int) -> int:
        return -1 if self.base else ctx.evolution_policy_round(round_)

    def key_part(self, ctx: RunContext, round_: int) -> str:
        return ctx.teacher_version(self._policy_round(ctx, round_))

    def load(self, ctx: RunContext, round_: int) -> Any:
        return ctx.make_teacher(self._policy_round(ctx, round_))


@dataclass(frozen=True)
class EnvTasks:
    """The environment's tasks of the splits named by the config field `splits` (a split name or a list;
    None = no split), by split."""

    splits: str

    def names(self, ctx: RunContext) -> list[str]:
        value = ctx.config.value(self.splits)
        return [] if value is None else [value] if isinstance(value, str) else list(value)

    def key_part(self, ctx: RunContext, round_: int) -> dict[str, str]:
        return {split: content_hash([t.id for t in ctx.env_tasks(split)]) for split in self.names(ctx)}

    def load(self, ctx: RunContext, round_: int) -> dict[str, list[Task]]:
        return {split: ctx.env_tasks(split) for split in self.names(ctx)}


@dataclass(frozen=True)
class When:
    """`read` only while the config field `field` is truthy (e.g. `dataset.bootstrap_tasks`); else the input
    is None and is not part of the key."""

    field: str
    read: Read

    def key_part(self, ctx: RunContext, round_: int) -> Any:
        return self.read.key_part(ctx, round_) if ctx.config.value(self.field) else None

    def load(self, ctx: RunContext, round_: int) -> Any:
        return self.read.load(ctx, round_) if ctx.config.value(self.field) else None


@dataclass(frozen=True)
class StageResult:
    artifacts: dict[str, list[dict[str, Any]] | pa.Table]
    outputs: dict[str, Any] = field(default_factory=dict)
    folders: tuple[Path, ...] = ()
    """Folders the stage wrote besides its artifacts (a checkpoint): their files' hashes go into the
    manifest and are checked like artifacts."""
    after_manifest: Callable[[], None] | None = None
    """Clean-up that runs once the manifest is written, never before: what it deletes (older checkpoints,
    their optimizer state) may be what this stage needs should it be computed again, and a run killed
    before its manifest computes it again."""


class Inputs(Mapping[str, Any]):
    """A stage's declared inputs, each loaded on first access; `key` is the stage run's cache key."""

    def __init__(self, ctx: RunContext, round_: int, reads: Mapping[str, Read], key: str) -> None:
        self._ctx, self._round, self._reads, self.key = ctx, round_, reads, key
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._reads:
            raise KeyError(f"input {name!r} is not declared by the stage (declared: {', '.join(self._reads)})")
        if name not in self._loaded:
            self._loaded[name] = self._reads[name].load(self._ctx, self._round)
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reads)

    def __len__(self) -> int:
        return len(self._reads)


@dataclass(frozen=True)
class StageDef:
    """A stage: its name, code version (bump it when its output for the same inputs changes), the config
    fields it depends on (dotted paths to a section or one field), what it reads, its compute function
    `(context, round, inputs) -> StageResult` and, from its phase's contract, what it writes (`writes`;
    the runner refuses another artifact); the context's config holds only the declared fields
    (`pipeline.declared`: reading another is an error, so the key covers everything the stage reads)."""

    name: str
    version: int
    config: tuple[str, ...]
    reads: Mapping[str, Read]
    compute: Callable[[StageContext, int, Inputs], StageResult]
    writes: Writes | None = None
