"""A second small OpenEnv environment of our own, of another shape than the stock room: a panel of lamps.

Where the stock room (`example_inventory`) is an `MCPEnvironment` with FastMCP tools, its own task source and
a rubric scoring every step, the panel is a plain OpenEnv `Environment` that answers `ListToolsAction` and
`CallToolAction` itself, lists no tasks (they come from a task file), ends its episode when the agent calls
`submit`, and is scored by a composite of OpenEnv's rubric containers: `Sequential(Submitted(), Matches())`,
0.0 until the panel is submitted, then 1.0 when every lamp is as the target says. It has no `verify`.

A task is its reset arguments: `lamps` (the panel at the start, `"0110"`: 1 on, 0 off) and `target` (the
panel wanted). Tools: `read_panel()`, `toggle(lamp)` (1-based), `submit()`. The reference calls toggle each
lamp that differs from the target, then submit: reward 1.0; doing nothing earns 0.0 (nothing submitted), and
submitting a wrong panel 0.0.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics.base import Rubric
from openenv.core.rubrics.containers import Sequential

TOOLS = [
    Tool(name="read_panel", description="The panel: one character per lamp, 1 on and 0 off.",
         input_schema={"type": "object", "properties": {}}),
    Tool(name="toggle", description="Switch lamp number `lamp` (1-based) on if off, off if on.",
         input_schema={"type": "object", "properties": {"lamp": {"type": "integer"}}, "required": ["lamp"]}),
    Tool(name="submit", description="Hand in the panel as it is; ends the episode.",
         input_schema={"type": "object", "properties": {}}),
]  # fmt: skip


class PanelState(State):
    """OpenEnv's episode state plus the panel, its target and whether it was handed in."""

    lamps: str = ""
    target: str = ""
    submitted: bool = False


class Submitted(Rubric):
    """1.0 once the panel is handed in, else 0.0."""

    def __init__(self, environment: LampPanel) -> None:
        super().__init__()
        self._environment = environment

    def forward(self, action: Any, observation: Any) -> float:
        return float(self._environment.panel.submitted)


class Matches(Rubric):
    """1.0 when every lamp is as the target says, else 0.0."""

    def __init__(self, environment: LampPanel) -> None:
        super().__init__()
        self._environment = environment

    def forward(self, action: Any, observation: Any) -> float:
        panel = self._environment.panel
        return float(bool(panel.target) and panel.lamps == panel.target)


def reference_calls(lamps: str, target: str) -> list[dict[str, Any]]:
    """The calls that bring `lamps` to `target` and hand it in."""
    differ = [i for i, (a, b) in enumerate(zip(lamps, target, strict=True)) if a != b]
    toggles = [{"name": "toggle", "arguments": {"lamp": i + 1}} for i in differ]
    return [*toggles, {"name": "submit", "arguments": {}}]


def lamp_rows(n: int = 8) -> list[dict[str, Any]]:
    """Deterministic task rows (the adapter's task format, with reference calls): a 4- to 6-lamp panel and a
    target one to three toggles away."""
    rows = []
    for k in range(n):
        width = 4 + k % 3
        lamps = "".join("1" if (k + i) % 3 == 0 else "0" for i in range(width))
        flips = {(k + 2 * j) % width for j in range(1 + k % 3)}
        target = "".join(("1" if c == "0" else "0") if i in flips else c for i, c in enumerate(lamps))
        on = [str(i + 1) for i, c in enumerate(target) if c == "1"]
        rows.append({"prompt": f"Set the {width}-lamp panel so that exactly lamps {', '.join(on) or 'none'} are on, "
                               "then submit it.",
                     "reset": {"lamps": lamps, "target": target}, "solution": reference_calls(lamps, target),
                     "split": "train" if k < n - 2 else "test", "family": "lamps"})  # fmt: skip
    return rows


class LampPanel(Environment):
    """The lamp panel (see the module docstring); one episode per instance at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.panel = PanelState(episode_id=None, step_count=0)
        self.rubric = Sequential(Submitted(self), Matches(self))

    def reset(self, seed: int | None = None, episode_id: str | None = None, *, lamps: str, target: str,
              **kwargs: Any) -> Observation:  # fmt: skip
        """A panel of `lamps` (`"0110"`) to bring to `target`; both are required."""
        if len(lamps) != len(target) or set(lamps + target) - {"0", "1"}:
            raise ValueError(f"lamps {lamps!r} and target {target!r} are two panels of one width, of 0s and 1s")
        self.panel = PanelState(episode_id=episode_id, step_count=0, lamps=lamps, target=target)
        observation = Observation(done=False, metadata={"lamps": len(lamps)})
        observation.reward = self._apply_rubric(None, observation)
        return observation

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=TOOLS)
        if not isinstance(action, CallToolAction):
            return Observation(done=False, metadata={"error": f"unsupported action {type(action).__name__}"})
        self.panel.step_count += 1
        try:
            result = self._call(action.tool_name, action.arguments)
            observation = CallToolObservation(tool_name=action.tool_name, result=result, done=self.panel.submitted)
        except (KeyError, TypeError, ValueError) as exc:
            error = ToolError(error_type=ToolErrorType.EXECUTION_ERROR, message=str(exc).strip("'\""))
            observation = CallToolObservation(tool_name=action.tool_name, result=None, error=error)
        observation.reward = self._apply_rubric(action, observation)
        return observation

    def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        panel = self.panel
        if panel.submitted:
            raise ValueError("the panel was already submitted")
        if name == "read_panel":
            return panel.lamps
        if name == "toggle":
            lamp = arguments["lamp"]
            if not isinstance(lamp, int) or not 1 <= lamp <= len(panel.lamps):
                raise ValueError(f"lamp must be a number from 1 to {len(panel.lamps)} (got {lamp!r})")
            flipped = "1" if panel.lamps[lamp - 1] == "0" else "0"
            panel.lamps = panel.lamps[: lamp - 1] + flipped + panel.lamps[lamp:]
            return panel.lamps
        if name == "submit":
            panel.submitted = True
            return "submitted"
        raise KeyError(f"unknown tool {name!r}; tools: read_panel, toggle, submit")

    @property
    def state(self) -> PanelState:
        return self.panel.model_copy()
