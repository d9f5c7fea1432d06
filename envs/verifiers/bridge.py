"""The verifiers side of the adapter (`envs.verifiers.env`): a process in the verifiers venv that runs a
verifiers v1 taskset for the project, one JSON request per line on stdin, one JSON answer per line on stdout.
It imports nothing of coevolve (the two cannot share a venv: verifiers 0.4.0 pins mcp==2.0.0, OpenEnv needs
mcp<2), and nothing it reads is evaluated: requests are JSON, the taskset is named by an import path.

Requests (`op`):
- `load` {taskset: "module:Class", paths: [...]}: the taskset's tasks, each `{"prompt", "data"}`;
- `reset` {data}: a fresh episode of the task `data` describes (its `setup` run on a new trace); its tools as
  OpenAI function schemas;
- `call` {name, arguments}: one tool call through the task's toolsets, served by MCP's own server in this
  process; the toolsets read and write the episode's state over verifiers' state channel
  (`VF_STATE_URL`/`VF_STATE_SECRET`, served here on 127.0.0.1) exactly as in a rollout;
- `state`: the episode's state as JSON (its `artifacts` left out);
- `score`: the task's rewards of the episode so far (`Task.score`, no runtime), their weighted sum;
- `validate` {data}: vf-validate's two model-free checks of the task: `gold` (`Task.validate`: its reference
  reaches the goal) and `noop` (the untouched task, scored, does not already reach 1.0).
Every answer is `{"ok": true, ...}` or `{"ok": false, "error": "<one line>"}`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SOLVED = 1.0
"""vf-validate's threshold: an untouched task whose reward reaches it already passes (its noop check fails)."""


class Channel:
    """verifiers' state channel on 127.0.0.1: GET returns the episode's state, PUT replaces it (the protocol of
    `verifiers.v1.mcp.server`), guarded by a bearer secret."""

    def __init__(self) -> None:
        self.secret, self.state, self.adapter = secrets.token_hex(16), None, None
        channel = self

        class Handler(BaseHTTPRequestHandler):
            def _authorized(self) -> bool:
                if self.headers.get("Authorization") != f"Bearer {channel.secret}":
                    self.send_response(401)
                    self.end_headers()
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self._authorized():
                    body = channel.adapter.dump_json(channel.state)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def do_PUT(self) -> None:  # noqa: N802
                if self._authorized():
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    channel.state = channel.adapter.validate_json(body)
                    self.send_response(204)
                    self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        os.environ["VF_STATE_URL"] = f"http://127.0.0.1:{self.server.server_address[1]}/state"
        os.environ["VF_STATE_SECRET"] = self.secret
        for name in ("NO_PROXY", "no_proxy"):  # the channel is on loopback: never through a proxy
            os.environ[name] = ",".join(filter(None, [os.environ.get(name), "127.0.0.1", "localhost"]))


def tool_schema(tool: Any) -> dict[str, Any]:
    data = tool.model_dump(by_alias=False) if hasattr(tool, "model_dump") else dict(tool)
    schema = data.get("input_schema") or data.get("inputSchema") or {"type": "object", "properties": {}}
    return {"type": "function",
            "function": {"name": data["name"], "description": data.get("description") or "", "parameters": schema}}


def result_text(result: Any) -> tuple[str, bool]:
    """A `CallToolResult` as the agent's tool message, and whether the call failed."""
    data = result.model_dump()
    structured = data.get("structured_content", data.get("structuredContent"))
    if structured is not None and not data.get("is_error", data.get("isError")):
        structured = structured.get("result", structured) if set(structured) == {"result"} else structured
        text = json.dumps(structured, sort_keys=True)
    else:
        text = "\n".join(str(c.get("text")) for c in data.get("content") or [] if c.get("text") is not None)
    return text, bool(data.get("is_error", data.get("isError")))


class Bridge:
    def __init__(self) -> None:
        self.taskset: Any = None
        self.channel = Channel()
        self.task: Any = None
        self.trace: Any = None
        self.server: Any = None

    def _task(self, data: dict[str, Any]) -> Any:
        if self.taskset is None:
            raise ValueError("no taskset loaded: send a load request first")
        task_type = self.taskset.task_type()
        return task_type(task_type.data_type().model_validate(data), self.taskset.config.task)

    def _trace(self, task: Any) -> Any:
        import verifiers.v1 as vf
        from verifiers.v1.state import state_cls

        return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                        state=state_cls(type(task))(), agent=vf.AgentInfo(config=vf.AgentConfig(), name="coevolve",
                                                                          trainable=False))

    async def load(self, taskset: str, paths: list[str]) -> dict[str, Any]:
        import verifiers.v1 as vf

        sys.path[:0] = [p for p in paths if p not in sys.path]
        module_name, _, name = taskset.partition(":")
        cls = getattr(importlib.import_module(module_name), name)
        config_type = getattr(cls, "config_type", None)
        self.taskset = cls(config_type()() if callable(config_type) else vf.TasksetConfig())
        return {"tasks": [{"prompt": t.data.prompt_text, "data": t.data.model_dump(mode="json", exclude_none=True)}
                          for t in self.taskset]}

    async def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        from mcp.server.mcpserver import MCPServer
        from pydantic import TypeAdapter

        self.task = self._task(data)
        self.trace = self._trace(self.task)
        await self.task.setup(self.trace, None)
        self.channel.adapter = TypeAdapter(type(self.trace.state))
        self.channel.state = self.trace.state
        self.server = MCPServer("coevolve")
        for toolset in type(self.task).toolsets(self.task.config):
            await toolset.setup()
            await toolset.setup_task(self.task)
            toolset.register(self.server)
        return {"tools": [tool_schema(t) for t in await self.server.list_tools()]}

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.server is None:
            raise ValueError("no episode: send a reset request first")
        try:
            result = await self.server.call_tool(name, arguments)
        except Exception as exc:  # an unknown tool or arguments MCP refuses: the agent's error message
            return {"text": f"Error: {exc}", "failed": True}
        text, failed = result_text(result)
        return {"text": f"Error: {text}" if failed else text, "failed": failed}

    async def state(self) -> dict[str, Any]:
        if self.task is None:
            raise ValueError("no episode: send a reset request first")
        return {"state": self.channel.state.model_dump(mode="json", exclude={"artifacts"})}

    async def score(self) -> dict[str, Any]:
        if self.task is None:
            raise ValueError("no episode: send a reset request first")
        self.trace.state = self.channel.state
        self.trace.rewards.clear()
        await self.task.score(self.trace, None)
        return {"reward": self.trace.reward if self.trace.rewards else None}

    async def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        task = self._task(data)
        gold = await task.validate(None)
        trace = self._trace(task)
        await task.setup(trace, None)
        await task.finalize(trace, None)
        await task.score(trace, None)
        noop_reward = trace.reward if trace.rewards else None
        return {"gold": gold, "noop": None if noop_reward is None else noop_reward < SOLVED, "noop_reward": noop_reward}


def main() -> None:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per state request otherwise
    bridge = Bridge()
    loop = asyncio.new_event_loop()
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever a taskset prints goes to stderr, never into the answers
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.pop("op")
            if op not in ("load", "reset", "call", "state", "score", "validate"):
                raise ValueError(f"unknown op {op!r}")
            answer = {"ok": True, **loop.run_until_complete(getattr(bridge, op)(**request))}
        except Exception as exc:  # one line back to the adapter, which names it
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}".replace("\n", " ")[:2000]}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
