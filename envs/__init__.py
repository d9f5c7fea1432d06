"""Environments: the interface (`envs.base.Environment`) and a registry to build them by name.

    from coevolve import envs
    env = envs.make("toolworld", seed=0)
    task = env.tasks("train")[0]
    obs = env.reset(task, seed=0)

Each `make` call returns a fresh instance that owns the state of one episode at a time.
"""

from __future__ import annotations

import importlib
from typing import Any

from coevolve.envs.base import Action, Environment, Evaluation, Observation, StepResult, Task

__all__ = ["Action", "Environment", "Evaluation", "Observation", "StepResult", "Task",
           "available", "environment_class", "make"]

_REGISTRY: dict[str, str] = {
    "toolworld": "coevolve.envs.toolworld.env:ToolWorldEnv",
    "bfcl": "coevolve.envs.bfcl.env:BfclEnv",
    "appworld": "coevolve.envs.appworld.env:AppWorldEnv",
}


def available() -> list[str]:
    """Names accepted by `make`."""
    return sorted(_REGISTRY)


def environment_class(name: str) -> type[Environment]:
    """The class registered under `name` (imported on first use)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; available: {', '.join(available())}")
    module_name, _, class_name = _REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def make(name: str, **options: Any) -> Environment:
    """Build a fresh environment instance; options are the environment's own constructor arguments."""
    return environment_class(name)(**options)
