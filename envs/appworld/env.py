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

A synthesized task (the evolved data) has no AppWorld tests of its own: `derive_checker` replays its
solution on the server and keeps what AppWorld's tests of its world report after it, with the answers
(`checker` module); `evaluate()` then completes the world if the code did not and judges it against that.

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from coevolve.core import ToolCall
from coevolve.envs.answers import answer_found
from coevolve.envs.appworld.actions import TOOL_NAME, code_literals, read_code
from coevolve.envs.appworld.checker import COMPLETE_TASK, answer_of, judge, tests_of
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
from coevolve.envs.base import (
    Action,
    Environment,
    EnvOptions,
    Evaluation,
    Observation,
    StepResult,
    Task,
    TaskSynthesis,
    check_options,
)

PARTIAL_CREDIT_SCALE = 0.4
NO_CODE_REMINDER = (
    "No code found in your reply. Call the execute tool with Python code (or write it in a ```python "
    "block); call apis.supervisor.complete_task() when the task is done."
)
_FAILED_PREFIX = "Execution failed"
_MAX_REQUIREMENTS = 10
MAX_LEDGER_CHARS = 20_000
"""Longest execution output kept in `info["calls"]` (the ledger); the agent sees `max_output_chars`."""


class AppWorldOptions(EnvOptions):
    """AppWorld's options, with their bounds (defaults: `AppWorldEnv`'s signature)."""

    base_url: str
    """The AppWorld environment server."""
    split_tasks: dict[str, Any] | None
    """Extra or replaced splits: split name -> task ids, or a file listing them (`tasks.task_ids`)."""
    timeout: Annotated[float, Field(gt=0, le=3600)]
    """Seconds a request to the server may take."""
    max_interactions: Annotated[int, Field(ge=1, le=1000)]
    """Code executions an episode may take."""
    experiment_name: Annotated[str, Field(min_length=1, pattern=r"^[^/]+$")]
    """The server's output folder of the episodes (a plain folder name)."""
    data_root: Any
    """AppWorld's data folder (default: `APPWORLD_ROOT` or the package's)."""
    partial_credit: bool
    """Reward a failed episode for the share of its unit tests that pass."""
    max_output_chars: Annotated[int, Field(ge=200, le=1_000_000)]
    """Longest execution output the agent sees."""


@dataclass
class _Episode:
    """The mutable state of the episode in progress (the world itself lives in the server)."""

    task: Task
    task_id: str
    interactions: int = 0
    completed: bool = False
    done: bool = False
    answer: str | None = None
    """The literal answer the code passed to `complete_task` (`checker.answer_of`), when it did."""


class AppWorldEnv(Environment, TaskSynthesis):
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
        check_options(AppWorldOptions, base_url=base_url, split_tasks=split_tasks, timeout=timeout,
                      max_interactions=max_interactions, experiment_name=experiment_name, data_root=data_root,
                      partial_credit=partial_credit, max_output_chars=max_output_chars)  # fmt: skip
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

    def argument_literals(self, call: ToolCall) -> list[Any]:
        """The literals inside the call's code (`actions.code_literals`), not the code itself: a query in
        plain English states the values a program needs, never the program."""
        code = call.arguments.get("code") if call.name == TOOL_NAME else None
        return code_literals(code) if isinstance(code, str) else super().argument_literals(call)

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
            completed = bool(self.client.post("/task_completed", {"task_id": episode.task_id}))
            if completed and not episode.completed:
                episode.answer = answer_of(parsed.code)
            episode.completed = completed
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
        """Run AppWorld's tests for the episode's world (call before `close`); a synthesized task's world
        is completed first if its code did not complete it, and judged against its checker."""
        episode = self._require_episode()
        if "world_tests" in episode.task.checker:
            if not episode.completed:
                self.client.post("/execute", {"task_id": episode.task_id, "code": COMPLETE_TASK})
                episode.completed = episode.done = True
            evaluation = synthesized_evaluation(
                episode.task.checker, self._report(episode.task_id), episode.answer,
                partial_credit=self.partial_credit,
            )  # fmt: skip
        else:
            evaluation = evaluation_of(self._report(episode.task_id), partial_credit=self.partial_credit)
        evaluation.details.update(
            appworld_task_id=episode.task_id, completed=episode.completed, interactions=episode.interactions
        )
        return evaluation

    def close(self) -> None:
        """Free the server's world; a no-op without an episode."""
        episode, self._episode = self._episode, None
        if episode is not None:
            self.client.post("/close", {"task_id": episode.task_id})

    # -- synthesized tasks ---------------------------------------------------------------------------

    def derive_checker(
        self,
        initial_state: dict[str, Any],
        turns: Sequence[str],
        solution: Sequence[Sequence[ToolCall]],
        answers: Sequence[Sequence[str]],
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """What AppWorld's tests of the task's world report once the solution ran in it and completed it
        (`checker` module), and the answers. The solution is replayed on the server, in a fresh world
        (dropping any episode in progress: one server holds one world); so is an idle one (completed at
        once). Raises ValueError when a call fails, a required answer appears in no output nor in the
        solution's `complete_task` answer, or the tests report the same after the solution as after the
        idle world while the task asks for no answer (nothing to check); with `strict=False` failed calls
        are kept as they ran, unseen answers dropped, and nothing is refused."""
        task_id = initial_state.get("task_id")
        if not isinstance(task_id, str) or not turns:
            raise ValueError("an AppWorld task needs initial_state.task_id and a turn")
        draft = Task(id="derive", env=self.name, split="synthesized", initial_state=dict(initial_state),
                     turns=list(turns), solution=[list(t) for t in solution], source="synthesized")  # fmt: skip
        outputs, answer, tests = self._replayed(draft, strict=strict)
        idle = self._replayed(draft.model_copy(update={"solution": []}), strict=strict)[2]
        seen = "\n".join([*outputs, answer or ""])
        kept = [[str(v) for v in turn if answer_found(str(v), seen)] for turn in answers]
        missing = [str(v) for turn in answers for v in turn if not answer_found(str(v), seen)]
        if strict and missing:
            raise ValueError(f"answer {missing[0][:80]!r} appears in no output of the solution")
        if strict and tests == idle and not any(kept):
            raise ValueError("the solution changes nothing AppWorld's tests of its world observe, and the "
                             "task asks for no answer: an idle answer would pass")  # fmt: skip
        return {"world_tests": tests, "answers": kept}

    def _replayed(self, task: Task, *, strict: bool) -> tuple[list[str], str | None, list[dict[str, Any]]]:
        """(one output per call, the answer, AppWorld's tests) of `task`'s solution run in a fresh world
        and completed."""
        self.reset(task)
        try:
            outputs = []
            for call in (c for turn in task.solution or [] for c in turn):
                step = self.step([call])
                outputs += [m["content"] for m in step.messages]
                failed = [c for c in step.info["calls"] if not c["ok"]] or step.info["parse_errors"]
                if strict and failed:
                    detail = failed[0]["error"] if isinstance(failed[0], dict) else failed[0]
                    raise ValueError(f"reference call {call.name} failed: {clip(detail, 300)}")
                if step.done:
                    if strict and not self._require_episode().completed:
                        raise ValueError(f"the solution runs past the interaction cap ({self.max_interactions})")
                    break
            episode = self._require_episode()
            if not episode.completed:
                self.client.post("/execute", {"task_id": episode.task_id, "code": COMPLETE_TASK})
            return outputs, episode.answer, tests_of(self._report(episode.task_id))
        finally:
            self.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _report(self, task_id: str) -> Any:
        return self.client.post("/evaluate", {"task_id": task_id, "suppress_errors": True, "report": False})

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


def synthesized_evaluation(
    checker: dict[str, Any], report: Any, answer: str | None, *, partial_credit: bool = True
) -> Evaluation:
    """A synthesized task's score: success when AppWorld's tests of its world report as after the reference
    and the answer states every required value; else `PARTIAL_CREDIT_SCALE` x the share of those checks met."""
    try:
        missed, total = judge(checker, report, answer)
    except ValueError as exc:
        raise AppWorldError(str(exc)) from None
    share = max(total - len(missed), 0) / total if total else 1.0
    success = not missed
    reward = 1.0 if success else (PARTIAL_CREDIT_SCALE * share if partial_credit else 0.0)
    details = {"checks": total, "missed": missed[:_MAX_REQUIREMENTS], "check_share": share, "answer": answer}
    return Evaluation(reward=reward, success=success, details=details)


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
