"""What every stage of a run gets: the config, the run's storage, environments, the policy and the teacher.

A `RunContext` lives as long as the process that drives the run (the Prefect flow or a `coevolve stage`
call). It is never serialised: Prefect tasks receive it as an in-process argument with caching off.

The parts a test replaces enter here, never by patching modules: `engine_factory` builds the policy's
inference engine from its loaded model (default: `HfEngine` in process, `OpenAIEngine` with
`model.servers`), `teacher_factory` builds the teacher of a round (default: `agents.teacher.make_teacher`).

What the context builds with code `pipeline` may not import (a phase's logic and the executors share its
floor) comes in as `RunServices`: the warm starts of the config's `warm_start` section
(`stages/warm_start/build.py`) and environments in Ray actors (`executors/ray_envs.py`).
`flows.run_context.open_run` wires them; that is how a run is opened:

    ctx = open_run(config, "demo", Path("runs"))
    ctx = open_run(config, "t", tmp, teacher_factory=ScriptedTeacherFactory(...))   # tests
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from coevolve import envs
from coevolve.agents.policy import EngineFactory, Policy, base_version, load_checkpoint_weights
from coevolve.config import CoevolveConfig
from coevolve.envs.base import Environment, Task
from coevolve.storage.datasets import Datasets
from coevolve.storage.layout import checkpoint_name, root_option
from coevolve.storage.parquet import ArtifactError, changed_in_folder
from coevolve.storage.store import RunStore

if TYPE_CHECKING:
    from coevolve.agents.teacher import Teacher

TeacherFactory = Callable[["RunContext", int], "Teacher"]
"""(context, policy round) -> the teacher; the policy round is the one a policy teacher uses (-1: base)."""


class EnvironmentPool(Protocol):
    """Environments that run elsewhere (`executors.ray_envs.RayEnvPool`): `make()` lends one out."""

    def make(self) -> Environment: ...


@dataclass(frozen=True)
class RunServices:
    """How a run's context names and builds its warm starts and reaches remote environments."""

    name_warm_starts: Callable[[CoevolveConfig], CoevolveConfig]
    """The config with the checkpoints its `warm_start` section asks for named, nothing built."""
    build_warm_starts: Callable[[CoevolveConfig, CoevolveConfig], list[Path]]
    """(config as written, named) -> the warm-start checkpoints built now (those this machine lacked)."""
    remote_envs: Callable[[CoevolveConfig], EnvironmentPool]
    """The config -> its pool of environments that run elsewhere (`runtime.ray_address`)."""


@dataclass
class RunContext:
    config: CoevolveConfig
    store: RunStore
    services: RunServices
    quiet: bool = False
    engine_factory: EngineFactory | None = None
    """Builds the policy's engine from its loaded model; None: the configured one."""
    teacher_factory: TeacherFactory | None = None
    """Builds the teacher; None: `agents.teacher.make_teacher`."""
    policy: Policy = field(init=False)
    spec: CoevolveConfig = field(init=False)
    """The config as written (saved into the run); `config` is it with its warm starts named."""
    _warm_starts_checked: bool = field(default=False, init=False, repr=False)
    _stale_policy: Policy | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.spec, self.config = self.config, self.services.name_warm_starts(self.config)
        self.policy = Policy(self.config.model, self.config.train, engine_factory=self.engine_factory)

    @property
    def run(self) -> str:
        return self.store.run

    @cached_property
    def datasets(self) -> Datasets:
        return Datasets(self.store)

    # -- environments ------------------------------------------------------------------------------

    def make_env(self) -> Environment:
        """A fresh environment for one episode: in this process, or in a Ray actor (`runtime.ray_address`)."""
        if self.config.runtime.ray_address:
            return self.remote_envs.make()
        return envs.make(self.config.env.name, **self.config.env.options)

    @cached_property
    def remote_envs(self) -> EnvironmentPool:
        """The pool `make_env` lends environments from with `runtime.ray_address` (started on first use)."""
        return self.services.remote_envs(self.config)

    @cached_property
    def _task_source(self) -> Environment:
        """Lists tasks (plain data, never an episode): always in this process."""
        return envs.make(self.config.env.name, **self.config.env.options)

    def env_tasks(self, split: str) -> list[Task]:
        env = self._task_source
        if split not in env.splits():
            raise ValueError(
                f"environment {self.config.env.name!r} has no split {split!r}; splits: {', '.join(env.splits())}"
            )
        return env.tasks(split)

    def tasks(self, task_ids: list[str], round_: int) -> list[Task]:
        """The Task objects of `task_ids` from the dataset versions up to round `round_`."""
        return [Task.from_row(row) for row in self.datasets.version_of(round_ + 1).task_rows(task_ids)]

    # -- policy and teacher ------------------------------------------------------------------------

    def policy_after(self, round_: int) -> tuple[str, Path | None]:
        """Version (and checkpoint) of the policy after round `round_`'s update; -1 = the base model. The
        checkpoint is this run's own (recorded relative to the run: `RunLayout.checkpoint_at`)."""
        if round_ < 0:
            return base_version(self.config.model), None
        manifest = self.store.completed(round_, "grpo_update")
        return manifest.outputs["policy_version"], self.store.layout.checkpoint_at(manifest.outputs["checkpoint"])

    def checked_policy_after(self, round_: int) -> tuple[str, Path | None]:
        """`policy_after`, its checkpoint refused in one line unless every file grpo_update recorded in its
        manifest has that content (sha256, hashed at most once per process): the weights a stage loads
        are the ones its cache key names. A folder that is gone is left to the loader's error."""
        version, checkpoint = self.policy_after(round_)
        if checkpoint is None or not checkpoint.is_dir():
            return version, checkpoint
        refs = self.store.completed(round_, "grpo_update").files.get(checkpoint_name(round_), {})
        changed = sorted(changed_in_folder(checkpoint, refs), key=lambda n: (not n.endswith(".safetensors"), n))
        if changed:
            first, *others = [name if (checkpoint / name).is_file() else f"{name} (missing)" for name in changed]
            also = f"; also {', '.join(others)}" if others else ""
            raise ArtifactError(
                f"checkpoint {checkpoint} of policy {version} is refused: {first} does not load as the file "
                f"grpo_update of round {round_} in run '{self.run}' saved (its manifest records another sha256"
                f"{also}); rebuild it with `coevolve stage grpo_update --run {self.run} --round {round_} --force"
                f"{root_option(self.store.layout.root)}`"
            )
        return version, checkpoint

    def evolution_policy_round(self, round_: int) -> int:
        """The round whose updated policy round `round_`'s evolution phases use (verification's attempts,
        a policy teacher): round_ - 1, or round_ itself with `evolve.verify_after_update`, which runs
        them after the round's update."""
        return round_ if self.config.evolve.verify_after_update else round_ - 1

    def build_warm_starts(self) -> list[Path]:
        """Build the warm starts the config names (`warm_start` section) if this machine lacks them (checked
        once per process); the checkpoints built now. The `warm-start` step (`stages.warm_start.stage`) calls it
        before round 0; a stage that needs a start on a machine that lacks it builds it here."""
        if self._warm_starts_checked:
            return []
        built = self.services.build_warm_starts(self.spec, self.config)
        self._warm_starts_checked = True
        return built

    def use_policy(self, round_: int) -> Policy:
        """The policy after round `round_` (-1 = base), loaded into memory if needed."""
        self.build_warm_starts()
        version, checkpoint = self.policy_after(round_)
        if version != self.policy.version:  # loaded from its checkpoint: check it first
            version, checkpoint = self.checked_policy_after(round_)
        self.policy.ensure(version, checkpoint)
        return self.policy

    def use_stale_policy(self, round_: int) -> Policy:
        """The policy after round `round_` in a second model of its own (`rollout.max_staleness` > 0): a stale
        rollout generates with it while grpo_update trains `policy` in place, so the two never share weights.
        The weights only: it never trains, and the optimizer state beside older checkpoints is dropped
        while it loads (`grpo_update`'s clean-up)."""
        self.build_warm_starts()
        if self._stale_policy is None:
            self._stale_policy = Policy(self.config.model, self.config.train, engine_factory=self.engine_factory)
        stale = self._stale_policy
        version, checkpoint = self.checked_policy_after(round_)
        if checkpoint is None or stale.model is None:
            stale.ensure(*self.policy_after(-1))
        if version != stale.version:
            load_checkpoint_weights(stale.model, checkpoint, version, lora=bool(self.config.train.lora_rank))
            stale.publish(version, checkpoint)
        return stale

    def teacher_version(self, policy_round: int) -> str:
        """Names the teacher's weights for cache keys: the policy version, or the configured model."""
        from coevolve.agents.teacher import teacher_version

        policy = self.policy_after(policy_round)[0] if self.config.teacher.type == "policy" else ""
        return teacher_version(self.config.teacher, policy)

    def make_teacher(self, policy_round: int) -> Teacher:
        """The teacher; a policy teacher is the policy after round `policy_round` (-1: the base model)."""
        if self.teacher_factory is not None:
            return self.teacher_factory(self, policy_round)
        self.build_warm_starts()
        from coevolve.agents.teacher import make_teacher

        return make_teacher(self.config.teacher, lambda: self.use_policy(policy_round),
                            self.teacher_version(policy_round))

    # -- output ------------------------------------------------------------------------------------

    @property
    def plain_output(self) -> bool:
        """Whether stage and progress lines go to stdout as plain lines: it is not a terminal (a log file,
        a pipe, a test's capture) and the context is not quiet. A terminal gets the rich bars instead."""
        return not self.quiet and not sys.stdout.isatty()

    def say(self, line: str) -> None:
        """One plain line on stdout when `plain_output` (a log shows what the run is doing)."""
        if self.plain_output:
            print(line, flush=True)

    @contextmanager
    def progress(self, description: str, total: int) -> Any:
        """A rich progress bar on a terminal (stderr); when stdout is not a terminal (`plain_output`) also
        plain lines there, at 25, 50, 75 and 100 % and otherwise at most one every `PLAIN_EVERY_S` seconds:
        `round 0 rollout: 48/96 (50 %) after 41.2 s`. Yields `advance(n)` (safe to call from threads)."""
        from rich.console import Console

        console = Console(stderr=True)
        lines = PlainProgress(description, total, self.say) if self.plain_output and total > 0 else None
        if self.quiet or not console.is_terminal:
            yield (lambda n=1: None) if lines is None else lines.advance
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task_id = bar.add_task(description, total=total)

            def advance(n: int = 1) -> None:
                bar.advance(task_id, n)
                if lines is not None:
                    lines.advance(n)

            yield advance


PLAIN_EVERY_S = 30.0
"""Between quarters, a long progress writes a plain line at most this often."""


class PlainProgress:
    """The plain-line form of a progress bar (`RunContext.progress` when output is not a terminal): a line
    at each quarter crossed, and one after `PLAIN_EVERY_S` seconds without a line."""

    def __init__(self, description: str, total: int, say: Callable[[str], None]) -> None:
        self.description, self.total, self.say = description, total, say
        self.done, self.quarter = 0, 0
        self.started = self.last = time.monotonic()
        self.lock = threading.Lock()

    def advance(self, n: int = 1) -> None:
        with self.lock:
            self.done += n
            now = time.monotonic()
            quarter = min(4, 4 * self.done // self.total)
            if quarter <= self.quarter and now - self.last < PLAIN_EVERY_S:
                return
            self.quarter, self.last = max(quarter, self.quarter), now
            self.say(f"{self.description}: {self.done}/{self.total} ({100 * self.done // self.total} %) "
                     f"after {now - self.started:.1f} s")
