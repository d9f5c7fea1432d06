"""`VerifiersEnv`: a verifiers v1 taskset (`verifiers==0.4.0`) as a CoEvolve environment, run in its own venv.

verifiers 0.4.0 pins `mcp==2.0.0` and OpenEnv needs `mcp<2`, so the two never share a venv: the taskset runs
in the verifiers venv (`make verifiers-env` builds `.venv-verifiers`) under `bridge.py`, and this adapter
talks to it as a child process, one JSON request and one JSON answer per line (nothing evaluated either side).

    VerifiersEnv(taskset="stock_taskset:StockTaskset", paths=[OWN_TASKSETS])

- tasks: the taskset's own (`Taskset.load`), all in split `train` unless a task's data names a `split`; a
  task's reset arguments are its wire data (`TaskData`), its prompt the user's turn, and a `reference` list of
  `{name, arguments}` calls in its data (as our stock room has) its reference solution;
- episodes: the adapter's (`envs.openenv.env.OpenEnvEnv`: token-in/token-out, tool calls one by one), each
  tool call through the task's `Toolset` (`@vf.tool`), served by MCP's own server in the bridge; the reward is
  the task's `@vf.reward`s (`Task.score`);
- synthesized tasks (`TaskSynthesis`): the reference calls replayed in a fresh episode must earn a successful
  reward and doing nothing must not (as for OpenEnv), and then vf-validate's two model-free checks of the
  candidate (its calls as the task's `reference`): `gold` (`Task.validate`) must not be False and `noop` (the
  untouched task, scored) must not already reach 1.0; each refusal is one line.

verifiers' own rollouts are not used: its harnesses run the agent as a PEP 723 script that `uv` installs
at run time (docs/openenv.md says why that rules rollouts out offline).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from coevolve.core import ToolCall
from coevolve.envs.base import EnvOptions, OptionError, Task, check_options
from coevolve.envs.openenv.env import SUCCESS_REWARD, OpenEnvEnv
from coevolve.envs.openenv.sessions import Session, SessionError, ToolOutcome

ENV_NAME = "verifiers"
HERE = Path(__file__).resolve().parent
BRIDGE = HERE / "bridge.py"
OWN_TASKSETS = str(HERE)
"""The folder of our own verifiers tasksets (`stock_taskset`), for `paths`."""
VENV_PYTHON = HERE.parents[1] / ".venv-verifiers" / "bin" / "python"
"""The verifiers venv's interpreter in a checkout (`make verifiers-env`)."""
REPLY_TIMEOUT_S = 120.0
"""Seconds the bridge may take to answer one request (its first, which imports verifiers, included)."""


class VerifiersOptions(EnvOptions):
    """The adapter's options."""

    taskset: str = ""
    """Extension, not the paper's: the verifiers v1 taskset's import path (`module:Class`) in the verifiers
    venv."""
    paths: list[str] = Field(default_factory=list)
    """Extension, not the paper's: folders put first on the taskset's import path."""
    python: str = ""
    """Extension, not the paper's: the verifiers venv's interpreter; empty: `.venv-verifiers/bin/python` of
    this checkout."""
    max_steps_per_turn: Annotated[int, Field(ge=1, le=1000)] = 6
    """Tool-calling steps a user turn may take before it ends unanswered."""


class Bridge:
    """`bridge.py` in the verifiers venv, as a child process of this one (its own, stopped by `close`)."""

    def __init__(self, python: str) -> None:
        if not Path(python).is_file():
            raise OptionError(f"env.options.python: no verifiers venv at {python} (make verifiers-env builds "
                              ".venv-verifiers)")  # fmt: skip
        self.rows: list[dict[str, Any]] = []
        """The taskset's tasks (`load`'s answer)."""
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - the bridge's stderr while it lives; `close`
        # -I: the bridge sees neither this process's PYTHONPATH nor its own folder; `paths` says what it imports
        self._process = subprocess.Popen([python, "-I", str(BRIDGE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._log, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def ask(self, op: str, **request: Any) -> dict[str, Any]:
        """The bridge's answer to one request; SessionError in one line when it fails or does not answer."""
        process = self._process
        try:
            process.stdin.write(json.dumps({"op": op, **request}) + "\n")
            process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise SessionError(f"the verifiers bridge exited ({self._last_words()})") from None
        ready, _, _ = select.select([process.stdout], [], [], REPLY_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if not line:
            raise SessionError(f"the verifiers bridge did not answer {op} ({self._last_words()})")
        answer = json.loads(line)
        if not answer.pop("ok"):
            raise SessionError(f"verifiers {op}: {answer['error']}")
        return answer

    def alive(self) -> bool:
        return self._process.poll() is None and not self._log.closed

    def _last_words(self) -> str:
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
        code = self._process.poll()
        return (f"exit code {code}; " if code is not None else "still running; ") + (lines[-1] if lines else "no output")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


_IDLE: dict[tuple[str, str, tuple[str, ...]], list[Bridge]] = {}
"""Bridges with their taskset loaded and no environment using them, by (python, taskset, paths): a bridge
starts in seconds (verifiers' imports), and verification builds an environment per check."""
_IDLE_LOCK = threading.Lock()


def _stop_idle() -> None:
    with _IDLE_LOCK:
        for bridges in _IDLE.values():
            for bridge in bridges:
                bridge.close()
        _IDLE.clear()


atexit.register(_stop_idle)


class VerifiersSession(Session):
    """One episode of a verifiers task through the bridge (one episode at a time per bridge)."""

    def __init__(self, bridge: Bridge) -> None:
        self._bridge, self._tools = bridge, []

    def reset(self, arguments: dict[str, Any], seed: int) -> None:
        self._tools = self._bridge.ask("reset", data=arguments)["tools"]

    def tools(self) -> list[dict[str, Any]]:
        return list(self._tools)

    def call(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        answer = self._bridge.ask("call", name=name, arguments=arguments)
        if answer["failed"]:
            return ToolOutcome(answer["text"], ok=False, error=answer["text"].removeprefix("Error: "))
        return ToolOutcome(answer["text"], ok=True)

    def state(self) -> dict[str, Any]:
        return self._bridge.ask("state")["state"]

    def reward(self, transcript: list[dict[str, str]]) -> float | None:
        return self._bridge.ask("score")["reward"]

    def close(self) -> None:
        pass  # the next reset starts a fresh episode in the same bridge


class VerifiersEnv(OpenEnvEnv):
    """A verifiers v1 taskset's episodes and verification (see the module docstring)."""

    name = ENV_NAME

    def __init__(self, taskset: str = "", paths: Sequence[str] = (), python: str = "",
                 max_steps_per_turn: int = 6) -> None:  # fmt: skip
        self.options = check_options(VerifiersOptions, taskset=taskset, paths=list(paths), python=python,
                                     max_steps_per_turn=max_steps_per_turn)  # fmt: skip
        if ":" not in taskset:
            raise OptionError("env.options.taskset: name the verifiers taskset as module:Class "
                              "(e.g. stock_taskset:StockTaskset with paths: [the folder of stock_taskset.py])")
        self._key = (python or str(VENV_PYTHON), taskset, tuple(str(Path(p).resolve()) for p in paths))
        self._bridge: Bridge | None = None
        self._splits: dict[str, list[Task]] | None = None
        self._episode = None

    def _connected(self) -> Bridge:
        """This environment's bridge: an idle one with the same taskset, else a new one that loads it."""
        if self._bridge is None:
            with _IDLE_LOCK:
                idle = _IDLE.get(self._key) or []
                self._bridge = idle.pop() if idle else None
            if self._bridge is None:
                bridge = Bridge(self._key[0])
                try:
                    bridge.rows = bridge.ask("load", taskset=self._key[1], paths=list(self._key[2]))["tasks"]
                except SessionError as exc:
                    bridge.close()
                    raise OptionError(f"env.options.taskset: {exc}") from None
                self._bridge = bridge
        return self._bridge

    def _tasks(self) -> dict[str, list[Task]]:
        if self._splits is None:
            rows = self._connected().rows
            self._splits = {}
            for row in rows:
                data = {k: v for k, v in row["data"].items() if k != "idx"}
                reference = data.get("reference")
                solution = [[ToolCall(**c) for c in reference]] if isinstance(reference, list) and reference else None
                split = data.get("split") if isinstance(data.get("split"), str) else "train"
                task = Task(id=Task.make_id(ENV_NAME, data, [row["prompt"]], {}), env=ENV_NAME, split=split,
                            family=type(self).__name__ if "family" not in data else str(data["family"]),
                            initial_state=data, turns=[row["prompt"]], solution=solution)  # fmt: skip
                self._splits.setdefault(split, []).append(task)
        return self._splits

    def _session(self) -> Session:
        return VerifiersSession(self._connected())

    def synthesis_refusal(self) -> str | None:
        return None  # a verifiers task scores itself (its @vf.reward), and validates itself

    def derive_checker(
        self,
        initial_state: dict[str, Any],
        turns: Sequence[str],
        solution: Sequence[Sequence[ToolCall]],
        answers: Sequence[Sequence[str]],
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """The reference replay's verdicts (`OpenEnvEnv.derive_checker`), then vf-validate's gold and noop checks
        of the candidate: its calls as the task's `reference`, its first turn as the prompt."""
        checker = super().derive_checker(initial_state, turns, solution, answers, strict=strict)
        data = {**initial_state, "prompt": turns[0] if turns else initial_state.get("prompt"),
                "reference": [c.model_dump() for turn in solution for c in turn]}  # fmt: skip
        try:
            verdict = self._connected().ask("validate", data=data)
        except SessionError:
            if strict:
                raise
            verdict = {"gold": None, "noop": None, "noop_reward": None}
        if strict and verdict["gold"] is False:
            raise ValueError("the taskset's validate (gold) says the reference calls do not solve the task")
        if strict and verdict["noop"] is False:
            raise ValueError(f"the taskset scores the untouched task {verdict['noop_reward']:.2f}: it already passes "
                             "(vf-validate's noop check)")  # fmt: skip
        return {**checker, "validate": {"gold": verdict["gold"], "noop": verdict["noop"]}}

    def shutdown(self) -> None:
        """End the episode and give the bridge back for the next environment of this taskset (`close` ends the
        episode only: `reset` calls it); the idle bridges stop when this process exits."""
        self.close()
        if self._bridge is not None and self._bridge.alive():
            with _IDLE_LOCK:
                _IDLE.setdefault(self._key, []).append(self._bridge)
        elif self._bridge is not None:
            self._bridge.close()
        self._bridge = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown()


__all__ = ["OWN_TASKSETS", "SUCCESS_REWARD", "VerifiersEnv"]
