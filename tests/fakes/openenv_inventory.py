"""The OpenEnv stock room (`coevolve.envs.openenv.example_inventory`) as the adapter's tests use it: its tasks
written as a task file with their reference calls, and the environment served on 127.0.0.1 by OpenEnv's
`create_app` under uvicorn, started and stopped by the test that needs it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coevolve.processes import free_port

ENVIRONMENT = "coevolve.envs.openenv.example_inventory:InventoryEnvironment"
APP_FACTORY = "coevolve.envs.openenv.example_inventory:create_inventory_app"
START_TIMEOUT_S = 120.0
"""Seconds the served stock room may take to answer /health (its imports take ~15 s on a busy CPU)."""


def reference_calls(reset: dict[str, Any]) -> list[dict[str, Any]]:
    """The one call that brings the goal item of a stock-room task to its goal count."""
    (item, want), = reset["goal"].items()
    have = reset["stock"].get(item, 0)
    name = "add_stock" if want > have else "remove_stock"
    return [{"name": name, "arguments": {"item": item, "quantity": abs(want - have)}}]


def write_task_file(path: Path, splits: tuple[str, ...] = ("train", "test")) -> Path:
    """The stock room's own tasks as a JSONL task file, each with its reference calls."""
    from coevolve.envs.openenv.example_inventory import inventory_tasks

    rows = [{**row, "split": split, "solution": reference_calls(row["reset"])}
            for split in splits for row in inventory_tasks(split)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@contextlib.contextmanager
def served_inventory(app_factory: str = APP_FACTORY) -> Iterator[str]:
    """The stock room (or `app_factory`'s app) served on a free 127.0.0.1 port for the block; yields its URL,
    then stops the server (this process's own child, by its handle)."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", app_factory, "--host", "127.0.0.1",
                               "--port", str(port), "--log-level", "warning"])  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the served stock room exited with {server.returncode}")
            try:
                if httpx.get(f"{url}/health", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the served stock room did not answer within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _stock_room() -> type:
    from coevolve.envs.openenv.example_inventory import InventoryEnvironment

    return InventoryEnvironment


class GoalRequiredEnvironment(_stock_room()):
    """The stock room whose reset needs its `goal` (no default): a task without one is a missing argument."""

    def reset(self, seed=None, episode_id=None, *, goal, stock=None, **kwargs):
        return super().reset(seed=seed, episode_id=episode_id, stock=stock, goal=goal)


class BadSchemaEnvironment(_stock_room()):
    """The stock room listing a tool whose input schema is an array, not a JSON-schema object."""

    def step(self, action, timeout_s=None, **kwargs):
        from openenv.core.env_server.mcp_types import ListToolsAction, ListToolsObservation, Tool

        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[Tool(name="count", description="", input_schema={"type": "array"})])
        return super().step(action, timeout_s=timeout_s, **kwargs)


def _harness() -> tuple[type, type]:
    from openenv.core.harness import ResourceSession, ResourceSessionFactory

    return ResourceSession, ResourceSessionFactory


class InventorySession(_harness()[0]):
    """The stock room through OpenEnv's harness layer: a `ResourceSession` whose `verify` forwards the
    rubric's reward of the final state."""

    def __init__(self, task: dict[str, Any]) -> None:
        self.env = _stock_room()()
        self.env.reset(**task)

    def initial_messages(self) -> list:
        return []

    def list_tools(self) -> list:
        from openenv.core.env_server.mcp_types import ListToolsAction

        return self.env.step(ListToolsAction()).tools

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        from openenv.core.env_server.mcp_types import CallToolAction
        from openenv.core.harness import ToolResult

        observation = self.env.step(CallToolAction(tool_name=name, arguments=arguments))
        if observation.error is not None:
            raise ValueError(observation.error.message)
        return ToolResult(data=observation.result.data)

    def verify(self, transcript: list, final_state: Any = None) -> Any:
        from openenv.core.harness import VerifyResult

        return VerifyResult(env_reward=self.env.rubric(None, None), done=True)

    def close(self) -> None:
        self.env.close()


class InventorySessions(_harness()[1]):
    """`ResourceSessionFactory` of the stock room: the task is the reset arguments."""

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> InventorySession:
        return InventorySession(task)


STOCK_ROOM_SESSIONS = InventorySessions()
"""A `ResourceSessionFactory` instance, as a module may export one."""


class UnlistedStockRoom(_stock_room()):
    """The stock room without a task source of its own (OpenEnv's Task API answers 501)."""

    def list_splits(self):
        raise NotImplementedError

    def list_tasks(self, split):
        raise NotImplementedError


def create_cramped_app() -> Any:
    """`UnlistedStockRoom` served with OpenEnv's default of one session at a time."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    return create_app(UnlistedStockRoom, CallToolAction, CallToolObservation, env_name="inventory")


CRAMPED_APP = "tests.fakes.openenv_inventory:create_cramped_app"
