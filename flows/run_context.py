"""Opening a run: its `RunContext` with the services its config names wired in, the one way the flow, the
command line, the benchmarks and the tests get a run's context.

    from coevolve.flows.run_context import open_run
    ctx = open_run(config, "demo", Path("runs"))                     # config as written; warm starts named
    ctx = open_run(config, "t", tmp, teacher_factory=ScriptedTeacherFactory(...))   # tests' seams

The services are the warm starts of the config's `warm_start` section (named now, built by the `warm-start`
step before round 0, or by the first stage that needs one on a machine that lacks it) and, with
`runtime.ray_address`, environments in Ray actors. Both are code of the phases and executors, on
`pipeline`'s floor: wiring them here, beside the flow that opens runs and above every phase, keeps
`pipeline` free of them and the phases' folder free of what is not a phase.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve.config import CoevolveConfig
from coevolve.pipeline.context import RunContext, RunServices
from coevolve.stages.warm_start.build import build_warm_starts, with_warm_starts
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore

if TYPE_CHECKING:
    from coevolve.executors.ray_envs import RayEnvPool


def ray_environments(config: CoevolveConfig) -> RayEnvPool:
    """The config's environment in pooled Ray actors at `runtime.ray_address` (Ray is imported now)."""
    from coevolve.executors.ray_envs import RayEnvPool

    runtime = config.runtime
    return RayEnvPool(runtime.ray_address, config.env.name, config.env.options, actor_cpus=runtime.ray_actor_cpus)


SERVICES = RunServices(name_warm_starts=with_warm_starts, build_warm_starts=build_warm_starts,
                       remote_envs=ray_environments)  # fmt: skip


def open_run(config: CoevolveConfig, run: str, root: Path, **options: Any) -> RunContext:
    """The context of run `run` under storage root `root`; `options` are `RunContext`'s own (quiet, the
    test seams `engine_factory` and `teacher_factory`)."""
    return RunContext(config, RunStore(RunLayout(root, run)), SERVICES, **options)
