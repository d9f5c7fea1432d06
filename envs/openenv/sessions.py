"""One episode's session with an OpenEnv environment, in this process or on its server.

The adapter (`envs.openenv.env`) talks to an OpenEnv environment through one small interface, `Session`:
`reset(arguments, seed)`, `tools()`, `call(name, arguments)`, `state()`, `reward()`, `close()`. Three
implementations:

- `LocalSession`: an instance of the environment's class (an `openenv.core.env_server.interfaces.Environment`,
  usually an `MCPEnvironment`), built from its import path; tools through `ListToolsAction`, calls through
  `CallToolAction`, both `step`s of the environment itself.
- `HarnessSession`: OpenEnv's harness layer in this process, a `ResourceSessionFactory` named by its import
  path: `create(task)` with the reset arguments as the task, `list_tools`, `call_tool`, `verify`.
- `ServedSession`: the environment served by OpenEnv's `create_app`, one WebSocket session (`/ws`) per
  episode: the same reset, step and state messages OpenEnv's own clients send. On loopback the connection
  never goes through a proxy the environment names (`coevolve.loopback`).

The reward is the environment's own: what its `verify(transcript, final_state)` returns where the session
or the (in-process) environment defines one, else the reward of its last observation, which OpenEnv environments set from their
rubric in `reset` and `step`. The adapter never computes a reward of its own.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from coevolve.loopback import http_client, is_loopback

HEALTH_TIMEOUT_S = 5.0
"""Seconds the adapter waits for a server's `/health` before naming `env.options.url` as unreachable."""
REPLY_TIMEOUT_S = 120.0
"""Seconds a served environment may take to answer one reset, step or state message."""


EXTRA_MODULES = ("openenv", "fastmcp", "websockets")
"""What the `openenv` extra installs: a module of these missing names the extra."""


class SessionError(ValueError):
    """The environment failed a reset or answered outside OpenEnv's protocol; the message is one line."""


@dataclass(frozen=True)
class ToolOutcome:
    """One tool call's result as the agent sees it."""

    text: str
    """The `tool` message: the result (JSON where it is structured), or `Error: ...`."""
    ok: bool
    error: str | None = None
    done: bool = False
    """The environment ended the episode with this call."""


def load_attribute(path: str) -> Any:
    """The object an import path names (`package.module:Name`), or ValueError in one line."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{path!r} is not an import path of the form package.module:Name")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a missing module, or one that fails to import: named, not a traceback
        missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
        hint = "; install the extra: pip install 'coevolve[openenv]'" if missing in EXTRA_MODULES else ""
        raise ValueError(f"cannot import {module_name!r} ({type(exc).__name__}: {exc}){hint}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attribute!r}") from None


def check_server(url: str) -> None:
    """ValueError in one line unless an OpenEnv server answers `/health` at `url`."""
    try:
        with http_client(url, timeout=HEALTH_TIMEOUT_S) as client:
            response = client.get("health")
    except Exception as exc:
        raise ValueError(f"no OpenEnv server answers at {url} ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise ValueError(f"{url}/health answered HTTP {response.status_code}, not an OpenEnv server's 200")


class ServedTasks:
    """A server's own task source: OpenEnv's Task API routes (`/list_environments`, `/{name}/splits`,
    `/{name}/tasks`), read over `coevolve.loopback.http_client`; ValueError in one line when it has none."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/")
        self._name = self._get("list_environments")[0]

    def _answer(self, method: str, route: str, **body: Any) -> Any:
        with http_client(self._url, timeout=REPLY_TIMEOUT_S) as client:
            response = client.request(method, route, **({"json": body} if body else {}))
        if response.status_code != 200:
            raise ValueError(f"{self._url}/{route} answered HTTP {response.status_code}: the server lists no tasks "
                             "of its own (OpenEnv's Task API); name a task file")  # fmt: skip
        return response.json()

    def _get(self, route: str) -> Any:
        return self._answer("GET", route)

    def list_splits(self) -> list[Any]:
        return self._get(f"{self._name}/splits")

    def list_tasks(self, split: str) -> list[Any]:
        return self._answer("POST", f"{self._name}/tasks", split=split)["tasks"]


def tool_schema(tool: Any) -> dict[str, Any]:
    """An MCP tool (object or dict: name, description, input_schema) in OpenAI function format; ValueError
    naming the tool when its schema is not a JSON-schema object."""
    get = tool.get if isinstance(tool, dict) else (lambda key, default=None: getattr(tool, key, default))
    name, schema = get("name"), get("input_schema") or get("inputSchema")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool without a name in the environment's tool list: {tool!r}")
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ValueError(f"tool {name!r}: its input schema is not a JSON-schema object (got {schema!r})")
    return {"type": "function",
            "function": {"name": name, "description": get("description") or "", "parameters": schema}}


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else getattr(value, key, None)


def call_outcome(observation: Any) -> ToolOutcome:
    """A `CallToolObservation` (object or its JSON) as the agent's tool message."""
    error, result = _field(observation, "error"), _field(observation, "result")
    done = bool(_field(observation, "done"))
    if error is not None:
        message = str(_field(error, "message") or error)
        return ToolOutcome(f"Error: {message}", ok=False, error=message, done=done)
    content = None if isinstance(result, str) else _field(result, "content")
    if content is None:  # a plain value, not an MCP CallToolResult
        text = result if isinstance(result, str) else json.dumps(result, sort_keys=True, default=str)
    elif (data := _field(result, "structured_content")) is not None:
        text = json.dumps(data, sort_keys=True, default=str)
    else:
        text = "\n".join(str(_field(c, "text")) for c in content if _field(c, "text") is not None)
    if _field(result, "is_error"):
        return ToolOutcome(f"Error: {text}", ok=False, error=text, done=done)
    return ToolOutcome(text, ok=True, done=done)


class Session(ABC):
    """One episode with an OpenEnv environment (see the module docstring): in process, through a harness
    session factory, or over a server's WebSocket."""

    last_reward: float | None = None
    """The reward of the environment's last observation (reset or step); None: it reported none."""

    @abstractmethod
    def reset(self, arguments: dict[str, Any], seed: int) -> None:
        """See the module docstring."""

    @abstractmethod
    def tools(self) -> list[dict[str, Any]]:
        """See the module docstring."""

    @abstractmethod
    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """See the module docstring."""

    @abstractmethod
    def state(self) -> dict[str, Any] | None:
        """The environment's state as JSON; None where the session exposes none."""

    def reward(self, transcript: list[dict[str, str]]) -> float | None:
        """The environment's reward for the episode so far (see the module docstring)."""
        return self.last_reward

    @abstractmethod
    def close(self) -> None:
        """See the module docstring."""

    def _observed(self, reward: Any) -> None:
        if reward is not None:
            self.last_reward = float(reward)


class LocalSession(Session):
    """An OpenEnv environment instance in this process."""

    def __init__(self, factory: Any) -> None:
        self._factory, self._env = factory, None

    def reset(self, arguments: dict[str, Any], seed: int) -> None:
        if self._env is None:
            self._env = self._factory()
        self.last_reward = None
        try:
            observation = self._env.reset(seed=seed, **arguments)
        except TypeError as exc:  # a reset argument the environment does not take, or a missing one
            raise SessionError(f"reset rejected the task's arguments: {exc}") from None
        self._observed(_field(observation, "reward"))

    def tools(self) -> list[dict[str, Any]]:
        from openenv.core.env_server.mcp_types import ListToolsAction

        observation = self._env.step(ListToolsAction())
        error = (_field(observation, "metadata") or {}).get("error")
        if error:
            raise SessionError(f"list_tools failed: {error}")
        return [tool_schema(tool) for tool in _field(observation, "tools") or []]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        from openenv.core.env_server.mcp_types import CallToolAction

        observation = self._env.step(CallToolAction(tool_name=name, arguments=arguments))
        self._observed(_field(observation, "reward"))
        return call_outcome(observation)

    def state(self) -> dict[str, Any]:
        state = self._env.state
        return state.model_dump() if hasattr(state, "model_dump") else dict(state or {})

    def reward(self, transcript: list[dict[str, str]]) -> float | None:
        verify = getattr(self._env, "verify", None)
        if not callable(verify):
            return self.last_reward
        verdict = verify(transcript, self.state())
        reward = getattr(verdict, "env_reward", verdict)
        return None if reward is None else float(reward)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class HarnessSession(Session):
    """A session of OpenEnv's harness layer: `ResourceSessionFactory.create(task, seed, episode_id)` gives a
    `ResourceSession` with `list_tools`, `call_tool`, `verify` and `close`; the task is the reset arguments."""

    def __init__(self, factory: Any) -> None:
        self._factory, self._session = factory, None

    def reset(self, arguments: dict[str, Any], seed: int) -> None:
        self.close()
        self.last_reward = None
        try:
            self._session = self._factory.create(dict(arguments), seed=seed, episode_id=None)
        except TypeError as exc:
            raise SessionError(f"create rejected the task's arguments: {exc}") from None

    def tools(self) -> list[dict[str, Any]]:
        return [tool_schema(tool) for tool in self._session.list_tools()]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            result = self._session.call_tool(name, arguments)
        except Exception as exc:  # a tool that raises is the agent's error message, as on a server
            return ToolOutcome(f"Error: {exc}", ok=False, error=str(exc))
        data, metadata = result.data, result.metadata or {}
        self._observed(metadata.get("reward", data.get("reward") if isinstance(data, dict) else None))
        if result.error:
            return ToolOutcome(f"Error: {result.error}", ok=False, error=str(result.error), done=result.done)
        text = data if isinstance(data, str) else json.dumps(data, sort_keys=True, default=str)
        return ToolOutcome(text, ok=True, done=result.done)

    def state(self) -> dict[str, Any] | None:
        return None  # the harness layer exposes no state: no digest, nothing concluded from one

    def reward(self, transcript: list[dict[str, str]]) -> float | None:
        verdict = self._session.verify(transcript, None)
        return self.last_reward if verdict.env_reward is None else float(verdict.env_reward)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


class ServedSession(Session):
    """An OpenEnv server's WebSocket session (`/ws`), one per episode."""

    def __init__(self, url: str) -> None:
        self._url, self._socket = url.rstrip("/"), None

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):  # closed: the server may have said why just before
            self._socket.send(json.dumps(message))
        try:
            reply = json.loads(self._socket.recv(timeout=REPLY_TIMEOUT_S))
        except ConnectionClosed as exc:
            raise SessionError(f"{self._url} closed the session ({exc})") from None
        if reply.get("type") == "error":
            raise SessionError(f"{self._url}: {(reply.get('data') or {}).get('message', reply)}")
        return reply.get("data") or {}

    def reset(self, arguments: dict[str, Any], seed: int) -> None:
        from websockets.sync.client import connect

        self.close()
        ws_url = "ws" + self._url.removeprefix("http") + "/ws"
        # on loopback never through a proxy the environment names (coevolve.loopback)
        self._socket = connect(ws_url, proxy=None if is_loopback(self._url) else True,
                               open_timeout=HEALTH_TIMEOUT_S, max_size=None)
        self.last_reward = None
        self._observed(self._ask({"type": "reset", "data": {**arguments, "seed": seed}}).get("reward"))

    def tools(self) -> list[dict[str, Any]]:
        observation = self._ask({"type": "step", "data": {"type": "list_tools"}})
        error = (observation.get("metadata") or {}).get("error")
        if error:
            raise SessionError(f"list_tools failed: {error}")
        return [tool_schema(tool) for tool in (observation.get("observation") or {}).get("tools") or []]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        reply = self._ask({"type": "step", "data": {"type": "call_tool", "tool_name": name, "arguments": arguments}})
        self._observed(reply.get("reward"))
        return call_outcome({**(reply.get("observation") or {}), "done": reply.get("done")})

    def state(self) -> dict[str, Any]:
        return self._ask({"type": "state"})

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(Exception):  # the server already went away: nothing left to free there
                self._socket.send(json.dumps({"type": "close"}))
            self._socket.close()
            self._socket = None
