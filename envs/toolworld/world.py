"""One episode's world: an instance of every app, loaded from a task's `initial_state`.

The state of the world is a dict app name -> app state. `World.state()` lists the apps the task loaded
plus any other app that is no longer empty, so a task that only involves the bank compares equal to its
expected final state as long as nothing else was touched, and an agent that writes a file it was never
asked to (possible with `tools="all"`) changes the state and fails the task.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from coevolve.envs.toolworld.apps import APP_CLASSES, App

APP_NAMES = tuple(cls.name for cls in APP_CLASSES)


class World:
    """All apps of one episode; `state()` is a detached, normalised copy of their data."""

    def __init__(self, state: Mapping[str, Any], loaded: frozenset[str] | None = None) -> None:
        unknown = sorted(set(state) - set(APP_NAMES))
        if unknown:
            raise ValueError(f"unknown app(s) in tool-world state: {unknown}; known: {list(APP_NAMES)}")
        self.loaded = frozenset(state) if loaded is None else loaded
        self.apps: dict[str, App] = {cls.name: cls(copy.deepcopy(state.get(cls.name))) for cls in APP_CLASSES}

    def state(self) -> dict[str, Any]:
        """App name -> state for the loaded apps and every app that is no longer empty."""
        return {
            name: copy.deepcopy(app.state)
            for name, app in self.apps.items()
            if name in self.loaded or app.state != app.empty_state()
        }
