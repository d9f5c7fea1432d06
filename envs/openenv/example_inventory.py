"""A small OpenEnv environment of our own: a stock room whose goal is a stock level per item.

It is written against OpenEnv's API only (an `MCPEnvironment` with FastMCP tools and a rubric), as a user's
environment would be, and serves two purposes: the example `docs/openenv.md` and `configs/openenv-tiny.yaml`
point at, and the fixture the adapter's tests run in process and served on 127.0.0.1.

A task is its reset arguments: `stock` (item -> count at the start) and `goal` (item -> count wanted).
The rubric scores the state after every reset and tool call: 1.0 when every goal item holds its count,
else 0.0, so the goal's own reference calls earn 1.0, doing nothing 0.0 (unless the goal is already met),
and a wrong reference 0.0.

    env = InventoryEnvironment()
    env.reset(stock={"bolt": 2}, goal={"bolt": 5}).reward                          # 0.0
    env.step(CallToolAction(tool_name="add_stock", arguments={"item": "bolt", "quantity": 3})).reward  # 1.0

Served: `uvicorn --factory coevolve.envs.openenv.example_inventory:create_inventory_app --host 127.0.0.1 --port 8011`.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics.base import Rubric

MAX_QUANTITY = 10_000
ITEMS = ("bolt", "nut", "gear", "spring", "washer")
SPLIT_SIZES = {"train": 16, "test": 6}
MAX_SESSIONS = 64
"""Episodes the served stock room holds at once (one WebSocket session each; OpenEnv's default is 1)."""


def inventory_tasks(split: str) -> list[dict[str, Any]]:
    """Deterministic tasks of `split`, each a row of the adapter's task format: a prompt and the reset
    arguments (a stock and the goal one item's count). No test prompt is a training prompt, though a run's
    twin guard leaves out the training tasks worded like a test task (they differ in a number only)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLIT_SIZES)}")
    offset = 0 if split == "train" else 100
    rows = []
    for i in range(SPLIT_SIZES[split]):
        k = i + offset
        item, have = ITEMS[k % len(ITEMS)], 1 + k % 7
        want = have + 1 + k % 4 if k % 2 == 0 else max(0, have - 1 - k % 3)
        stock = {item: have, ITEMS[(k + 1) % len(ITEMS)]: 3}
        rows.append({"prompt": f"Make the stock room hold exactly {want} unit{'' if want == 1 else 's'} of {item}.",
                     "reset": {"stock": stock, "goal": {item: want}}, "family": "add" if want > have else "remove"})
    return rows


class InventoryState(State):
    """OpenEnv's episode state plus the stock room's counts."""

    stock: dict[str, int] = {}
    goal: dict[str, int] = {}


class GoalRubric(Rubric):
    """1.0 when every goal item holds exactly its goal count, else 0.0 (a goal of no items: 0.0)."""

    def __init__(self, environment: InventoryEnvironment) -> None:
        super().__init__()
        self._environment = environment

    def forward(self, action: Any, observation: Any) -> float:
        stock, goal = self._environment.stock, self._environment.goal
        return float(bool(goal) and all(stock.get(item, 0) == count for item, count in goal.items()))


class InventoryEnvironment(MCPEnvironment):
    """The stock room: `list_stock`, `add_stock`, `remove_stock`; one episode per instance at a time. A call
    the room refuses raises FastMCP's `ToolError`: the agent reads its message, the log gets no traceback."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("inventory")
        self.stock: dict[str, int] = {}
        self.goal: dict[str, int] = {}

        @mcp.tool
        def list_stock() -> dict[str, int]:
            """The count of every item in the stock room."""
            return dict(sorted(self.stock.items()))

        @mcp.tool
        def add_stock(item: str, quantity: int) -> dict[str, int]:
            """Add `quantity` units of `item`; returns the item's new count."""
            self._check_quantity(quantity)
            self.stock[item] = self.stock.get(item, 0) + quantity
            return {item: self.stock[item]}

        @mcp.tool
        def remove_stock(item: str, quantity: int) -> dict[str, int]:
            """Remove `quantity` units of `item` (no more than it holds); returns the item's new count."""
            self._check_quantity(quantity)
            if self.stock.get(item, 0) < quantity:
                raise ToolError(f"only {self.stock.get(item, 0)} units of {item!r} in stock")
            self.stock[item] -= quantity
            return {item: self.stock[item]}

        super().__init__(mcp)
        self.rubric = GoalRubric(self)
        self._state = InventoryState(episode_id=None, step_count=0)

    @staticmethod
    def _check_quantity(quantity: int) -> None:
        if not 0 < quantity <= MAX_QUANTITY:
            raise ToolError(f"quantity must be between 1 and {MAX_QUANTITY} (got {quantity})")

    def reset(self, seed: int | None = None, episode_id: str | None = None, stock: dict[str, int] | None = None,
              goal: dict[str, int] | None = None, **kwargs: Any) -> Observation:
        """Start an episode with `stock` in the room and `goal` to reach."""
        self.stock, self.goal = dict(stock or {}), dict(goal or {})
        self._state = InventoryState(episode_id=episode_id, step_count=0)
        observation = Observation(done=False, metadata={"items": sorted(self.stock)})
        observation.reward = self._apply_rubric(None, observation)
        return observation

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._scored(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._scored(action, await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _scored(self, action: Action, observation: Observation) -> Observation:
        if isinstance(action, CallToolAction):
            self._state.step_count += 1
        observation.reward = self._apply_rubric(action, observation)
        return observation

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, metadata={"error": f"unsupported action {type(action).__name__}"})

    def list_splits(self) -> list[str]:
        """OpenEnv's task source (`TaskProvider`): the splits of `inventory_tasks`."""
        return list(SPLIT_SIZES)

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """The tasks of `split` (`inventory_tasks`)."""
        return inventory_tasks(split)

    @property
    def state(self) -> InventoryState:
        return self._state.model_copy(update={"stock": dict(self.stock), "goal": dict(self.goal)})


def create_inventory_app() -> Any:
    """The FastAPI app serving the stock room (OpenEnv's `create_app`, no web interface)."""
    from openenv.core.env_server.http_server import create_app

    return create_app(InventoryEnvironment, CallToolAction, CallToolObservation, env_name="inventory",
                      max_concurrent_envs=MAX_SESSIONS)
