"""`AppWorldEnv`: AppWorld tasks through `appworld serve environment`, AppWorld's own HTTP server.

    # once, in a venv of its own (AppWorld's pins clash with ours; `download data` needs internet):
    #   python3 -m venv .venv-appworld && .venv-appworld/bin/pip install appworld \
    #     && .venv-appworld/bin/appworld install && .venv-appworld/bin/appworld download data
    # per worker, from the folder that holds data/:  .venv-appworld/bin/appworld serve environment --port 8000
    from coevolve import envs
    env = envs.make("appworld", base_url="http://127.0.0.1:8000")
    task = env.tasks("dev")[0]                   # splits: train, dev, test_normal, test_challenge
    obs = env.reset(task)                        # the instruction + one tool, execute(code)
    env.step("```python\\nprint(apis.api_docs.show_app_descriptions())\\n```")
    env.step('<tool_call>{"name": "execute", "arguments": {"code": "apis.supervisor.complete_task()"}}'
             '</tool_call>')
    print(env.evaluate())                        # AppWorld's unit tests: success = all pass (TGC)
    env.close()

An action is Python code (see `actions.read_code`: a ```python block, an `execute` tool call, or a list
of calls). The code goes to the server's `/execute`, which runs it in AppWorld's sandboxed process; our
process never executes it. Its printed output is the observation (a `tool` message, clipped to
`max_output_chars`). After each execution `/task_completed` says whether the code called
`apis.supervisor.complete_task`, which ends the episode; so does the `max_interactions`-th reply (30 in
the AppWorld paper). A reply without code runs nothing: it gets a `user` reminder to write code and
counts as an interaction.

`evaluate()` runs AppWorld's tests (`/evaluate`). Success = every test passes (TGC); reward 1.0 then,
else `PARTIAL_CREDIT_SCALE` x the share of tests passed (at most 0.4, never a success), or 0.0 with
`partial_credit=False`. `close()` frees the server's world (`/close`).

One AppWorld server holds one world at a time (initialising a task closes the others), so every
concurrent episode needs its own server and `base_url`. Errors of the server or the network raise
`AppWorldError` naming the URL and the fix; every request times out after `timeout` seconds.

Options: `base_url`, `timeout` (s per request), `max_interactions`, `experiment_name` (AppWorld's output
folder name), `split_tasks` / `data_root` (where task ids come from: the server cannot list a split, see
`envs.appworld.tasks`), `partial_credit`, `max_output_chars`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from coevolve.envs.appworld.actions import TOOL_NAME, read_code
from coevolve.envs.appworld.client import DEFAULT_URL, AppWorldClient, AppWorldError
from coevolve.envs.appworld.tasks import (
    EXECUTE_TOOL,
    SPLITS,
    SplitTasks,
    build_task,
    data_root,
    task_ids,
    task_info,
)
from coevolve.envs.base import Action, Environment, Evaluation, Observation, StepResult, Task

PARTIAL_CREDIT_SCALE = 0.4
NO_CODE_REMINDER = (
    "No code found in your reply. Call the execute tool with Python code (or write it in a ```python "
    "block); call apis.supervisor.complete_task() when the task is done."
)
_FAILED_PREFIX = "Execution failed"
_MAX_REQUIREMENTS = 10
MAX_LEDGER_CHARS = 20_000
"""Longest execution output kept in `info["calls"]` (the ledger); the agent sees `max_output_chars`."""


@dataclass
class _Episode:
    """The mutable state of the episode in progress (the world itself lives in the server)."""

    task: Task
    task_id: str
    interactions: int = 0
    completed: bool = False
    done: bool = False


class AppWorldEnv(Environment):
    """One AppWorld episode at a time, on the server at `base_url`."""

    name = "appworld"

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        split_tasks: SplitTasks | None = None,
        timeout: float = 60,
        max_interactions: int = 30,
        experiment_name: str = "coevolve",
        data_root: str | os.PathLike[str] | None = None,
        partial_credit: bool = True,
        max_output_chars: int = 6000,
    ) -> None:
        if max_interactions < 1 or max_output_chars < 200:
            raise ValueError("max_interactions must be >= 1 and max_output_chars >= 200")
        if not experiment_name or "/" in experiment_name:
            raise ValueError(f"experiment_name must be a plain folder name, got {experiment_name!r}")
        self.client = AppWorldClient(base_url, timeout)
        self.split_tasks = dict(split_tasks or {})
        self.max_interactions, self.max_output_chars = max_interactions, max_output_chars
        self.experiment_name, self.partial_credit = experiment_name, partial_credit
        self._root_option = data_root
        self._tasks: dict[str, list[Task]] = {}
        self._episode: _Episode | None = None

    # -- tasks -------------------------------------------------------------------------------------

    def splits(self) -> list[str]:
        """AppWorld's four splits, plus any extra split named in `split_tasks`."""
        return [*SPLITS, *(s for s in self.split_tasks if s not in SPLITS)]

    def task_ids(self, split: str) -> list[str]:
        """AppWorld task ids of `split` (see `tasks` module for where they come from); no server needed."""
        if split not in self.splits():
            raise ValueError(f"unknown AppWorld split {split!r}; available: {', '.join(self.splits())}")
        return task_ids(split, self.split_tasks, data_root(self._root_option))

    def tasks(self, split: str) -> list[Task]:
        """The tasks of `split`, loaded on first use (instructions from specs.json or the server)."""
        if split not in self._tasks:
            root = data_root(self._root_option)
            self._tasks[split] = [
                build_task(split, task_id, task_info(task_id, root, self.client))
                for task_id in self.task_ids(split)
            ]
        return list(self._tasks[split])

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        """The one tool every AppWorld task offers: execute(code)."""
        return [EXECUTE_TOOL]

    # -- episode -----------------------------------------------------------------------------------

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        """Load `task`'s world on the server (AppWorld worlds are deterministic: `seed` changes nothing)."""
        task_id = task.initial_state.get("task_id")
        if not isinstance(task_id, str) or not task.turns:
            raise ValueError(f"task {task.id} is no AppWorld task: it needs initial_state.task_id and a turn")
        self._episode = None
        output = self.client.post(
            "/initialize", {"task_id": task_id, "experiment_name": self.experiment_name}
        )
        if not isinstance(output, dict) or output.get("task_id") != task_id:
            raise AppWorldError(
                f"AppWorld server at {self.client.base_url} initialised {output!r:.120} instead of {task_id}"
            )
        self._episode = _Episode(task, task_id)
        return Observation(messages=[{"role": "user", "content": task.turns[0]}], tools=self.tool_schemas())

    def step(self, action: Action) -> StepResult:
        """Send the action's code to the server; the episode ends on complete_task or the interaction cap."""
        episode = self._require_episode()
        if episode.done:
            return StepResult.episode_over(0)
        parsed = read_code(action)
        episode.interactions += 1
        info: dict[str, Any] = {
            "calls": [],
            "parse_errors": list(parsed.errors),
            "turn": 0,
            "interaction": episode.interactions,
        }
        messages = []
        if parsed.code:
            output = self.client.post("/execute", {"task_id": episode.task_id, "code": parsed.code})
            text = output if isinstance(output, str) else json.dumps(output, default=str)
            ok = not text.lstrip().startswith(_FAILED_PREFIX)
            call = {"name": TOOL_NAME, "arguments": {"code": parsed.code}, "ok": ok}
            info["calls"].append({**call, ("result" if ok else "error"): clip(text, MAX_LEDGER_CHARS)})
            messages.append({"role": "tool", "content": clip(text, self.max_output_chars)})
            episode.completed = bool(self.client.post("/task_completed", {"task_id": episode.task_id}))
        messages += [{"role": "tool", "content": f"could not parse tool call: {e}"} for e in parsed.errors]
        if not parsed.code and not parsed.errors:
            messages.append({"role": "user", "content": NO_CODE_REMINDER})
        if episode.completed:
            info["completed"] = True
        elif episode.interactions >= self.max_interactions:
            info["interaction_limit"] = True
        episode.done = episode.completed or episode.interactions >= self.max_interactions
        return StepResult(messages=messages, done=episode.done, turn_ended=episode.done, info=info)

    def evaluate(self) -> Evaluation:
        """Run AppWorld's tests for the episode's world (call before `close`)."""
        episode = self._require_episode()
        report = self.client.post(
            "/evaluate", {"task_id": episode.task_id, "suppress_errors": True, "report": False}
        )
        evaluation = evaluation_of(report, partial_credit=self.partial_credit)
        evaluation.details.update(
            appworld_task_id=episode.task_id, completed=episode.completed, interactions=episode.interactions
        )
        return evaluation

    def close(self) -> None:
        """Free the server's world; a no-op without an episode."""
        episode, self._episode = self._episode, None
        if episode is not None:
            self.client.post("/close", {"task_id": episode.task_id})

    # -- helpers -----------------------------------------------------------------------------------

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("no episode in progress: call reset(task) first")
        return self._episode


def clip(text: str, limit: int) -> str:
    """`text` cut in the middle to about `limit` characters (the head holds data, the tail a traceback)."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}\n... [{len(text) - 2 * keep} characters cut] ...\n{text[-keep:]}"


def evaluation_of(report: Any, *, partial_credit: bool = True) -> Evaluation:
    """Reward and success from AppWorld's test report {success, num_tests, passes, failures, difficulty}."""
    if not isinstance(report, dict) or not isinstance(report.get("passes"), list):
        raise AppWorldError(f"unexpected AppWorld evaluation report: {report!r:.200}")
    passes, failures = report["passes"], list(report.get("failures") or [])
    num_tests = report.get("num_tests")
    num_tests = num_tests if isinstance(num_tests, int) and num_tests > 0 else len(passes) + len(failures)
    share = len(passes) / num_tests if num_tests else 1.0
    success = bool(report["success"]) if "success" in report else not failures
    reward = 1.0 if success else (PARTIAL_CREDIT_SCALE * min(share, 1.0) if partial_credit else 0.0)
    details = {
        "num_tests": num_tests,
        "passed": len(passes),
        "failed": len(failures),
        "pass_share": share,
        "difficulty": report.get("difficulty"),
        "failed_requirements": [
            str(f.get("requirement", ""))[:200] if isinstance(f, dict) else str(f)[:200]
            for f in failures[:_MAX_REQUIREMENTS]
        ],
    }
    return Evaluation(reward=reward, success=success, details=details)
