"""The built-in tool world as an OpenEnv environment: `ToolWorldOpenEnv`, in process or served.

It wraps the tool world's own parts (`envs.toolworld`: its `World`, `ToolCatalog` and checker) behind
OpenEnv's API, so that the adapter (`env.name: openenv`) runs the tool world as it runs any user's
environment, and gives the same data as the native `toolworld`:

- `reset(initial_state=..., checker=..., solution_tools=...)`: a world loaded with the task's apps, the
  expected final state and answers (`checker`), the reference's tool names (partial credit);
- `ListToolsAction`: the schemas of the tools of the task's apps, as the native environment offers them;
- `CallToolAction`: the call run by the tool world's catalog (same results, same `Error:` texts);
- `state`: OpenEnv's `State` whose fields besides `episode_id`/`step_count` are the world state, so the
  adapter's state digest is the native one;
- reward: the tool world's `score`. `verify(transcript, final_state)` (called in process) reads each turn's
  final reply from the transcript: the native reward. OpenEnv's server carries tool calls only, never the
  agent's replies, so the reward of an observation (the rubric, what a served session reads) looks for the
  answers in the tool results of the episode instead, as does `verify` on a transcript without a user turn
  (a replay of calls, as verification runs): the checks of the native `build_checker`.

Tasks are the native splits' (`list_splits`/`list_tasks`, rows of `envs.openenv.tasks`' format). Served:
`uvicorn --factory coevolve.envs.openenv.toolworld_server:create_toolworld_app --host 127.0.0.1 --port 8012`.
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
from openenv.core.harness import VerifyResult
from openenv.core.rubrics.base import Rubric

from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.toolworld.checker import ToolUse, build_checker, score
from coevolve.envs.toolworld.env import ToolWorldEnv
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.envs.toolworld.world import World

MAX_SESSIONS = 64
"""Episodes the served tool world holds at once (one WebSocket session each)."""
PARSE_ERROR_PREFIX = "could not parse tool call:"
"""How the adapter's transcript words a tool-call block that did not parse (a malformed call)."""


def reset_arguments(task: Task) -> dict[str, Any]:
    """A native task's reset arguments: its initial world, its checker (expected final state and answers,
    computed from the reference as the native environment does) and the reference's tool names."""
    checker = task.checker
    if "final_state" not in checker:
        answers = checker.get("answers") or [[] for _ in task.turns]
        checker = build_checker(ToolCatalog(strict_arguments=False), task.initial_state, task.turns,
                                task.solution or [], answers)  # fmt: skip
    tools = sorted({call.name for calls in task.solution or [] for call in calls})
    return {"initial_state": task.initial_state, "checker": checker, "solution_tools": tools}


def task_row(task: Task) -> dict[str, Any]:
    """A native task as a row of the adapter's task format (its reference calls where it has one turn)."""
    row: dict[str, Any] = {"turns": list(task.turns), "reset": reset_arguments(task), "family": task.family}
    if task.solution is not None and len(task.turns) == 1:
        row["solution"] = [call.model_dump() for call in task.solution[0]]
    return row


def replies_of(transcript: list[dict[str, Any]]) -> tuple[list[str | None], int]:
    """Each user turn's final reply (None where the turn is unanswered) and the malformed call blocks, read
    from the adapter's transcript: a turn's reply is its last message when that is the assistant's."""
    replies: list[str | None] = []
    malformed, last = 0, None
    for message in transcript:
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "user":
            if replies:
                replies[-1] = last
            replies.append(None)
            last = None
            continue
        last = content if role == "assistant" else None
        malformed += role == "tool" and content.startswith(PARSE_ERROR_PREFIX)
    if replies:
        replies[-1] = last
    return replies, malformed


class WorldRubric(Rubric):
    """The tool world's score of the current state and tool use, each answer looked for in the episode's
    tool results (the server never sees a reply): 1.0 when the world is the expected one and every answer
    was read, else partial credit."""

    def __init__(self, environment: ToolWorldOpenEnv) -> None:
        super().__init__()
        self._environment = environment

    def forward(self, action: Any, observation: Any) -> float:
        return self._environment.evaluation(None).reward


class ToolWorldOpenEnv(Environment):
    """The tool world (seed 0, the native default splits) as an OpenEnv environment; one episode per
    instance at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        self._catalog = ToolCatalog(strict_arguments=False)  # the native environment's default
        self._world = World({})
        self._offered: tuple[str, ...] = ()
        self._checker: dict[str, Any] = {"final_state": {}, "answers": []}
        self._wanted: frozenset[str] = frozenset()
        self._use = ToolUse()
        self._results: list[str] = []
        self._state = State(episode_id=None, step_count=0)
        self._native: ToolWorldEnv | None = None
        self.rubric = WorldRubric(self)

    # -- OpenEnv's API -----------------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              initial_state: dict[str, Any] | None = None, checker: dict[str, Any] | None = None,
              solution_tools: list[str] | None = None, **kwargs: Any) -> Observation:  # fmt: skip
        """Load `initial_state`'s apps; `checker` is the expected final state and answers."""
        if initial_state is None or checker is None or "final_state" not in checker:
            raise TypeError("reset() needs initial_state and checker (with its final_state)")
        self._world = World(initial_state)
        self._offered = tuple(self._catalog.names(self._world.loaded))
        self._checker = {"final_state": checker["final_state"], "answers": checker.get("answers") or []}
        self._wanted, self._use, self._results = frozenset(solution_tools or ()), ToolUse(), []
        self._state = State(episode_id=episode_id, step_count=0)
        observation = Observation(done=False, metadata={"apps": sorted(self._world.loaded)})
        observation.reward = self._apply_rubric(None, observation)
        return observation

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, ListToolsAction):
            tools = [Tool(name=s["function"]["name"], description=s["function"]["description"],
                          input_schema=s["function"]["parameters"]) for s in self._catalog.schemas(self._offered)]
            return ListToolsObservation(tools=tools)  # fmt: skip
        if not isinstance(action, CallToolAction):
            return Observation(done=False, metadata={"error": f"unsupported action {type(action).__name__}"})
        self._state.step_count += 1
        outcome = self._catalog.call(self._world.apps, ToolCall(name=action.tool_name, arguments=action.arguments),
                                     self._offered)  # fmt: skip
        use = self._use
        self._use = ToolUse(any_ok=use.any_ok or outcome.ok, called=use.called | {action.tool_name},
                            parsed=use.parsed + 1, malformed=use.malformed)  # fmt: skip
        if outcome.ok:
            self._results.append(outcome.content())
            observation = CallToolObservation(tool_name=action.tool_name, result=outcome.content())
        else:
            error = ToolError(error_type=ToolErrorType.EXECUTION_ERROR, message=outcome.error)
            observation = CallToolObservation(tool_name=action.tool_name, result=None, error=error)
        observation.reward = self._apply_rubric(action, observation)
        return observation

    @property
    def state(self) -> State:
        """OpenEnv's episode counters plus the world state (app name -> its data)."""
        return State(episode_id=self._state.episode_id, step_count=self._state.step_count, **self._world.state())

    def verify(self, transcript: list[dict[str, Any]], final_state: Any = None) -> VerifyResult:
        """The native reward of the episode: the world state, tool use and each turn's reply in `transcript`
        (with no user turn in it, the answers looked for in the tool results)."""
        evaluation = self.evaluation(transcript)
        return VerifyResult(env_reward=evaluation.reward, done=True, metrics={"success": evaluation.success})

    # -- the tool world's score --------------------------------------------------------------------

    def evaluation(self, transcript: list[dict[str, Any]] | None) -> Any:
        """The tool world's `Evaluation` (`checker.score`); without the agent's replies (None, or a
        transcript with no user turn) each turn's answers are looked for in the episode's tool results."""
        replies, malformed = replies_of(transcript or [])
        if not replies:
            replies = ["\n".join(self._results)] * len(self._checker["answers"])
        use = ToolUse(any_ok=self._use.any_ok, called=self._use.called, parsed=self._use.parsed,
                      malformed=malformed)  # fmt: skip
        return score(self._checker, self._world.state(), replies, use, self._wanted)

    # -- its own task source -----------------------------------------------------------------------

    def _tasks(self) -> ToolWorldEnv:
        if self._native is None:
            self._native = ToolWorldEnv(seed=self.seed)
        return self._native

    def list_splits(self) -> list[str]:
        """OpenEnv's task source (`TaskProvider`): the native tool world's splits."""
        return self._tasks().splits()

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """The native tasks of `split` as rows of the adapter's task format (`task_row`)."""
        return [task_row(task) for task in self._tasks().tasks(split)]


def create_toolworld_app() -> Any:
    """The FastAPI app serving the tool world (OpenEnv's `create_app`, no web interface)."""
    from openenv.core.env_server.http_server import create_app

    return create_app(ToolWorldOpenEnv, CallToolAction, CallToolObservation, env_name="toolworld",
                      max_concurrent_envs=MAX_SESSIONS)
