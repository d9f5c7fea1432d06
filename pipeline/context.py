"""What every stage of a run gets: the config, the run's storage, environments, the policy and the teacher.

A `RunContext` lives as long as the process that drives the run (the Prefect flow or a `coevolve stage`
call). It is never serialised: Prefect tasks receive it as an in-process argument with caching off.

The parts a test replaces enter here, never by patching modules: `engine_factory` builds the policy's
inference engine from its loaded model (default: `HfEngine` in process, `OpenAIEngine` with
`model.servers`), `teacher_factory` builds the teacher of a round (default: `agents.teacher.make_teacher`).

    ctx = RunContext.create(config, "demo", Path("runs"))
    ctx = RunContext.create(config, "t", tmp, teacher_factory=ScriptedTeacherFactory(...))   # tests
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve import envs
from coevolve.agents.policy import EngineFactory, Policy, base_version
from coevolve.config import CoevolveConfig
from coevolve.envs.base import Environment, Task
from coevolve.storage.datasets import Datasets
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore

if TYPE_CHECKING:
    from coevolve.agents.teacher import Teacher
    from coevolve.executors.ray_envs import RayEnvPool

TeacherFactory = Callable[["RunContext", int], "Teacher"]
"""(context, policy round) -> the teacher; the policy round is the one a policy teacher uses (-1: base)."""


@dataclass
class RunContext:
    config: CoevolveConfig
    store: RunStore
    quiet: bool = False
    engine_factory: EngineFactory | None = None
    """Builds the policy's engine from its loaded model; None: the configured one."""
    teacher_factory: TeacherFactory | None = None
    """Builds the teacher; None: `agents.teacher.make_teacher`."""
    policy: Policy = field(init=False)
    spec: CoevolveConfig = field(init=False)
    """The config as written (saved into the run); `config` is it with its warm starts named."""
    _warm_starts_checked: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        from coevolve.evolution.warm_start import with_warm_starts

        self.spec, self.config = self.config, with_warm_starts(self.config)
        self.policy = Policy(self.config.model, self.config.train, engine_factory=self.engine_factory)

    @classmethod
    def create(cls, config: CoevolveConfig, run: str, root: Path, **options: Any) -> RunContext:
        return cls(config, RunStore(RunLayout(root, run)), **options)

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
            return self._ray_pool.make()
        return envs.make(self.config.env.name, **self.config.env.options)

    @cached_property
    def _ray_pool(self) -> RayEnvPool:
        from coevolve.executors.ray_envs import RayEnvPool

        runtime = self.config.runtime
        return RayEnvPool(runtime.ray_address, self.config.env.name, self.config.env.options,
                          actor_cpus=runtime.ray_actor_cpus)

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
        """Version (and checkpoint) of the policy after round `round_`'s update; -1 = the base model."""
        if round_ < 0:
            return base_version(self.config.model), None
        manifest = self.store.completed(round_, "grpo_update")
        return manifest.outputs["policy_version"], Path(manifest.outputs["checkpoint"])

    def evolution_policy_round(self, round_: int) -> int:
        """The round whose updated policy round `round_`'s evolution phases use (verification's attempts,
        a policy teacher): round_ - 1, or round_ itself with `evolve.verify_after_update`, which runs
        them after the round's update."""
        return round_ if self.config.evolve.verify_after_update else round_ - 1

    def build_warm_starts(self) -> None:
        """Build the warm starts the config names (`warm_start` section) if this machine lacks them."""
        if not self._warm_starts_checked:
            from coevolve.evolution.warm_start import build_warm_starts

            build_warm_starts(self.spec, self.config)
            self._warm_starts_checked = True

    def use_policy(self, round_: int) -> Policy:
        """The policy after round `round_` (-1 = base), loaded into memory if needed."""
        self.build_warm_starts()
        version, checkpoint = self.policy_after(round_)
        self.policy.ensure(version, checkpoint)
        return self.policy

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

    @contextmanager
    def progress(self, description: str, total: int) -> Any:
        """A rich progress bar on a terminal (none when quiet or when output goes to a file); yields
        `advance(n)`."""
        from rich.console import Console

        console = Console(stderr=True)
        if self.quiet or not console.is_terminal:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task_id = bar.add_task(description, total=total)
            advance: Callable[[int], None] = lambda n=1: bar.advance(task_id, n)  # noqa: E731
            yield advance
