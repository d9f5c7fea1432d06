"""Environments: the interface (`envs.base.Environment`) and a registry to build them by name.

    from coevolve import envs
    env = envs.make("toolworld", seed=0)
    task = env.tasks("train")[0]
    obs = env.reset(task, seed=0)

Each `make` call returns a fresh instance that owns the state of one episode at a time.

Besides the built-in environments, any installed distribution can register its own under the entry-point
group `coevolve.envs` (name -> "module:Class", the class an `Environment` subclass), without editing this
package; a built-in name cannot be taken over:

    [project.entry-points."coevolve.envs"]
    myworld = "my_package.env:MyWorldEnv"
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from coevolve.envs.base import (
    Action,
    Environment,
    EnvOptions,
    Evaluation,
    FreshTasks,
    Observation,
    OptionError,
    StepResult,
    Task,
    TaskSynthesis,
    check_options,
)

__all__ = ["Action", "EnvOptions", "Environment", "Evaluation", "FreshTasks", "Observation", "OptionError",
           "StepResult", "Task", "TaskSynthesis", "available", "check_options", "environment_class", "make", "registry"]

ENTRY_POINT_GROUP = "coevolve.envs"

_REGISTRY: dict[str, str] = {
    "toolworld": "coevolve.envs.toolworld.env:ToolWorldEnv",
    "bfcl": "coevolve.envs.bfcl.env:BfclEnv",
    "appworld": "coevolve.envs.appworld.env:AppWorldEnv",
    "openenv": "coevolve.envs.openenv.env:OpenEnvEnv",
}


def registry() -> dict[str, str]:
    """Every registered name -> "module:Class": the built-in ones, then those of installed distributions'
    `coevolve.envs` entry points (read at each call, so a package installed meanwhile is found)."""
    plugins = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {**plugins, **_REGISTRY}


def available() -> list[str]:
    """Names accepted by `make`."""
    return sorted(registry())


def environment_class(name: str) -> type[Environment]:
    """The class registered under `name` (imported on first use). A built-in name is looked up without
    reading the installed distributions' entry points (about 10 ms, and `make` runs once per episode): no
    plugin can take it over."""
    target = _REGISTRY.get(name) or registry().get(name)
    if target is None:
        raise ValueError(f"unknown environment {name!r}; available: {', '.join(available())}")
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise TypeError(f"environment {name!r}: {target} is not a subclass of coevolve.envs.Environment")
    return cls


def make(name: str, **options: Any) -> Environment:
    """Build a fresh environment instance; options are the environment's own constructor arguments."""
    return environment_class(name)(**options)
