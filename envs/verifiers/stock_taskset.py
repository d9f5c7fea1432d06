"""A stock room written against verifiers v1 (`verifiers==0.4.0`, `import verifiers.v1 as vf`): our own
environment for the verifiers adapter (`envs.verifiers`). It runs in the verifiers venv (`.venv-verifiers`,
`make verifiers-env`), never in the project's: this module imports nothing of coevolve.

- `StockState` (a `vf.State`): the room's counts, the rollout state that the toolset and the task share;
- `StockToolset` (a `vf.Toolset`): `@vf.tool` `list_stock`, `add_stock`, `remove_stock`, reading and changing
  `self.state` (in a rollout the toolset is an MCP server that syncs the state over its channel);
- `StockTask` (a `vf.Task`): `setup` loads the task's stock into the state, `@vf.reward goal_reached` is 1.0
  when every goal item holds its goal count, `validate` applies the task's reference calls to a fresh room
  and checks the goal (vf-validate's gold check);
- `StockTaskset` (a `vf.Taskset`): deterministic tasks (prompt, stock, goal, reference calls).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

ITEMS = ("bolt", "nut", "washer", "screw", "rivet", "hinge")
MAX_QUANTITY = 1000
N_TASKS = 12


class StockState(vf.State):
    """The stock room's counts (item -> units)."""

    stock: dict[str, int] = Field(default_factory=dict)


def changed(stock: dict[str, int], name: str, item: str, quantity: int) -> dict[str, int]:
    """`stock` after one `add_stock`/`remove_stock` call (ValueError, the agent's error message, when the room
    refuses it)."""
    if not 0 < quantity <= MAX_QUANTITY:
        raise ValueError(f"quantity must be between 1 and {MAX_QUANTITY} (got {quantity})")
    have = stock.get(item, 0)
    if name == "remove_stock" and have < quantity:
        raise ValueError(f"only {have} units of {item!r} in stock")
    return {**stock, item: have + quantity if name == "add_stock" else have - quantity}


class StockToolset(vf.Toolset[vf.ToolsetConfig, StockState]):
    """The stock room's tools, advertised bare (no server prefix)."""

    TOOL_PREFIX = None

    @vf.tool
    def list_stock(self) -> dict[str, int]:
        """The count of every item in the stock room."""
        return dict(sorted(self.state.stock.items()))

    @vf.tool
    def add_stock(self, item: str, quantity: int) -> dict[str, int]:
        """Add `quantity` units of `item`; returns the item's new count."""
        self.state.stock = changed(self.state.stock, "add_stock", item, quantity)
        return {item: self.state.stock[item]}

    @vf.tool
    def remove_stock(self, item: str, quantity: int) -> dict[str, int]:
        """Remove `quantity` units of `item` (no more than it holds); returns the item's new count."""
        self.state.stock = changed(self.state.stock, "remove_stock", item, quantity)
        return {item: self.state.stock[item]}


class StockData(vf.TaskData):
    """A task's row: the prompt, the room's stock, the goal counts, and the reference calls."""

    stock: dict[str, int] = Field(default_factory=dict)
    goal: dict[str, int] = Field(default_factory=dict)
    reference: list[dict[str, Any]] = Field(default_factory=list)
    """The calls that reach the goal, each `{"name": ..., "arguments": {...}}`."""


def goal_met(stock: dict[str, int], goal: dict[str, int]) -> float:
    return float(bool(goal) and all(stock.get(item, 0) == count for item, count in goal.items()))


class StockTask(vf.Task[StockData, StockState]):
    """Reach the goal counts with the stock room's tools."""

    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [StockToolset(vf.ToolsetConfig())]

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime | None = None) -> None:
        trace.state.stock = dict(self.data.stock)

    @vf.reward
    async def goal_reached(self, trace: vf.Trace) -> float:
        """1.0 when every goal item holds exactly its goal count, else 0.0 (a goal of no items: 0.0)."""
        return goal_met(trace.state.stock, self.data.goal)

    async def validate(self, runtime: vf.Runtime | None = None) -> bool | None:
        """The reference calls applied to a fresh room reach the goal (None: the task has no reference)."""
        if not self.data.reference:
            return None
        stock = dict(self.data.stock)
        try:
            for call in self.data.reference:
                arguments = call.get("arguments") or {}
                stock = changed(stock, call["name"], arguments["item"], arguments["quantity"])
        except (KeyError, TypeError, ValueError):
            return False
        return goal_met(stock, self.data.goal) == 1.0


def stock_rows(n: int = N_TASKS) -> list[dict[str, Any]]:
    """Deterministic task rows: one goal item, its count to raise or lower, and the one reference call."""
    rows = []
    for k in range(n):
        item, have = ITEMS[k % len(ITEMS)], 2 + k % 5
        want = have + 1 + k % 3 if k % 2 == 0 else have - 1 - k % 2
        name = "add_stock" if want > have else "remove_stock"
        rows.append({"prompt": f"Make the stock room hold exactly {want} units of {item}.",
                     "stock": {item: have, ITEMS[(k + 1) % len(ITEMS)]: 4}, "goal": {item: want},
                     "reference": [{"name": name, "arguments": {"item": item, "quantity": abs(want - have)}}]})
    return rows


class StockTaskset(vf.Taskset[StockTask]):
    """The stock room's tasks (`stock_rows`)."""

    def load(self) -> Iterable[StockTask]:
        for row in stock_rows():
            yield StockTask(StockData(**row), self.config.task)
