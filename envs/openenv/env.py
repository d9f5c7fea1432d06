"""`OpenEnvEnv` (`env.name: openenv`): any OpenEnv environment as a CoEvolve environment.

    env:
      name: openenv
      options:
        environment: my_package.server:MyEnvironment   # in process (or a ResourceSessionFactory), or
        # url: http://127.0.0.1:8000                   # its server (OpenEnv's create_app)
        tasks: data/tasks.jsonl                        # reset arguments + prompts (envs.openenv.tasks)

Episodes are the project's (token-in/token-out, `agents.episodes`); this adapter only runs them: `reset`
resets an OpenEnv session with the task's reset arguments and offers its `list_tools`; a reply's tool
calls go through `call_tool` one by one; a reply without tool syntax ends the user turn; `evaluate` reads
the environment's own reward (`sessions`). With `tasks` left empty the environment's own task source
(`list_splits`/`list_tasks`, in process or through its server's Task API) gives the tasks.

Synthesized tasks (`TaskSynthesis`): a candidate is reset arguments plus reference calls. Its checker is
derived by the environment itself: the reference calls replayed in a fresh session must earn a successful
reward, and the same session with no calls must not, else the candidate is refused with that reason.
Requires the `openenv` extra (`pip install 'coevolve[openenv]'`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import (
    Action,
    Environment,
    EnvOptions,
    Evaluation,
    Observation,
    OptionError,
    StepResult,
    Task,
    TaskSynthesis,
    check_options,
)
from coevolve.envs.openenv.sessions import (
    HarnessSession,
    LocalSession,
    ServedSession,
    ServedTasks,
    Session,
    check_server,
    load_attribute,
)
from coevolve.envs.openenv.tasks import provided_tasks, read_tasks
from coevolve.llm.toolcalls import ParsedReply, parse_call_list, parse_tool_calls

SUCCESS_REWARD = 0.5
"""The reward at and above which an episode succeeded (the project's convention, `Evaluation`)."""
EPISODE_STATE = ("episode_id", "step_count")
"""Fields of OpenEnv's `State` that count the episode, not its content: left out of the state digest."""


class OpenEnvOptions(EnvOptions):
    """The adapter's options (`env.options` of a run config)."""

    environment: str = ""
    """Extension, not the paper's: the OpenEnv environment's import path (`package.module:Class`, or a
    function returning an instance; or a `ResourceSessionFactory` of OpenEnv's harness layer), run in this
    process; or leave it empty and name `url`."""
    url: str = ""
    """Extension, not the paper's: the address of the environment's OpenEnv server
    (`http://127.0.0.1:8000`); or leave it empty and name `environment`."""
    tasks: str = ""
    """Extension, not the paper's: a JSONL or Parquet file of tasks (reset arguments and prompts,
    `envs.openenv.tasks`); empty: the environment's own task source (`list_splits`/`list_tasks`)."""
    max_steps_per_turn: Annotated[int, Field(ge=1, le=1000)] = 6
    """Tool-calling steps a user turn may take before it ends unanswered."""


@dataclass
class _Episode:
    task: Task
    session: Session
    replies: list[str | None]
    transcript: list[dict[str, str]]
    turn: int = 0
    steps_in_turn: int = 0
    done: bool = False
    calls: list[str] = field(default_factory=list)


def read_action(action: Any) -> ParsedReply:
    return parse_tool_calls(action) if isinstance(action, str) else parse_call_list(action)


class OpenEnvEnv(Environment, TaskSynthesis):
    """One episode at a time of an OpenEnv environment, in process or on its server."""

    name = "openenv"

    def __init__(self, environment: str = "", url: str = "", tasks: str = "", max_steps_per_turn: int = 6) -> None:
        self.options = check_options(OpenEnvOptions, environment=environment, url=url, tasks=tasks,
                                     max_steps_per_turn=max_steps_per_turn)  # fmt: skip
        if bool(environment) == bool(url):
            raise OptionError("env.options: name exactly one of environment (an import path, in process) or url "
                              "(its OpenEnv server)")  # fmt: skip
        try:
            self._factory = load_attribute(environment) if environment else None
            if url:
                check_server(url)
        except ValueError as exc:
            raise OptionError(f"env.options.{'environment' if environment else 'url'}: {exc}") from None
        if self._factory is not None and not (callable(self._factory) or hasattr(self._factory, "create")):
            raise OptionError(f"env.options.environment: {environment!r} is not a class, a function or a "
                              "ResourceSessionFactory")  # fmt: skip
        self._splits: dict[str, list[Task]] | None = None
        self._episode: _Episode | None = None

    # -- tasks -------------------------------------------------------------------------------------

    def _tasks(self) -> dict[str, list[Task]]:
        if self._splits is None:
            if self.options.tasks:
                self._splits = read_tasks(Path(self.options.tasks))
            elif self._factory is None:
                try:
                    self._splits = provided_tasks(ServedTasks(self.options.url))
                except ValueError as exc:
                    raise OptionError(f"env.options.tasks: {exc}") from None
            else:
                source = self._factory() if isinstance(self._factory, type) or not hasattr(self._factory, "create") \
                    else self._factory  # fmt: skip
                if not (hasattr(source, "list_splits") and hasattr(source, "list_tasks")):
                    raise OptionError(f"env.options.tasks: {self.options.environment} has no task source of its "
                                      "own (list_splits/list_tasks): name a JSONL or Parquet task file")  # fmt: skip
                self._splits = provided_tasks(source)
        return self._splits

    def splits(self) -> list[str]:
        return list(self._tasks())

    def tasks(self, split: str) -> list[Task]:
        splits = self._tasks()
        if split not in splits:
            raise ValueError(f"unknown split {split!r} of the OpenEnv tasks; splits: {', '.join(splits)}")
        return list(splits[split])

    # -- episode -----------------------------------------------------------------------------------

    def _session(self) -> Session:
        if self._factory is None:
            return ServedSession(self.options.url)
        from openenv.core.harness import ResourceSessionFactory

        if isinstance(self._factory, type) and issubclass(self._factory, ResourceSessionFactory):
            return HarnessSession(self._factory())
        if isinstance(self._factory, ResourceSessionFactory):
            return HarnessSession(self._factory)
        return LocalSession(self._factory)

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        """A fresh session reset with the task's arguments; the first user turn and the session's tools."""
        if not task.turns:
            raise ValueError(f"task {task.id} has no user turns")
        self.close()
        session = self._session()
        try:
            session.reset(dict(task.initial_state), seed)
            tools = session.tools()
        except BaseException:
            session.close()
            raise
        first = {"role": "user", "content": task.turns[0]}
        self._episode = _Episode(task, session, [None] * len(task.turns), [first])
        return Observation(messages=[first], tools=tools)

    def step(self, action: Action) -> StepResult:
        """Run the reply's tool calls through `call_tool`, or take it as the turn's answer; never raises on
        content."""
        episode = self._require_episode()
        if episode.done:
            return StepResult.episode_over(episode.turn)
        parsed = read_action(action)
        info: dict[str, Any] = {"calls": [], "parse_errors": list(parsed.errors), "turn": episode.turn}
        if not parsed.has_tool_syntax:
            return self._end_turn(episode, parsed.content, info)
        episode.steps_in_turn += 1
        if episode.steps_in_turn > self.options.max_steps_per_turn:
            return self._end_turn(episode, None, {**info, "step_limit": True})
        messages = []
        for call in parsed.calls:
            outcome = episode.session.call(call.name, call.arguments)
            episode.calls.append(call.name)
            result = {"result": outcome.text} if outcome.ok else {"error": outcome.error}
            info["calls"].append({"name": call.name, "arguments": call.arguments, "ok": outcome.ok, **result})
            messages.append({"role": "tool", "content": outcome.text})
            episode.done = episode.done or outcome.done
        messages += [{"role": "tool", "content": f"could not parse tool call: {e}"} for e in parsed.errors]
        reply = action if isinstance(action, str) else json.dumps([c.model_dump() for c in parsed.calls])
        episode.transcript += [{"role": "assistant", "content": reply}, *messages]
        return StepResult(messages=messages, done=episode.done, turn_ended=False, info=info)

    def evaluate(self) -> Evaluation:
        """The environment's own reward for the episode so far (its `verify`, or its last observation's)."""
        episode = self._require_episode()
        reward = episode.session.reward(episode.transcript)
        details = {"calls": len(episode.calls), "reported": reward is not None}
        value = 0.0 if reward is None else reward
        return Evaluation(reward=value, success=value >= SUCCESS_REWARD, details=details)

    def close(self) -> None:
        if self._episode is not None:
            self._episode.session.close()
            self._episode = None

    def state_digest(self) -> str | None:
        """Content hash of the environment's state, its episode counters left out; None where the session
        exposes no state (OpenEnv's harness layer)."""
        state = self._require_episode().session.state()
        if state is None:
            return None
        return content_hash({k: v for k, v in state.items() if k not in EPISODE_STATE})

    # -- synthesized tasks -------------------------------------------------------------------------

    def offers(self, role: type) -> bool:
        """`TaskSynthesis` only where the environment can score a final state (`synthesis_refusal`)."""
        if role is TaskSynthesis and self.synthesis_refusal() is not None:
            return False
        return super().offers(role)

    def synthesis_refusal(self) -> str | None:
        """One line saying why the environment cannot verify a synthesized task; None where it can. An
        in-process environment with neither a rubric nor `verify` scores no final state; a harness session
        always has `verify`; a served one is known only by its replies (a replay whose episode reports no
        reward is refused, `_replayed`)."""
        factory = self._factory
        if factory is None or not callable(factory) or (not isinstance(factory, type) and hasattr(factory, "create")):
            return None
        from openenv.core.harness import ResourceSessionFactory

        if isinstance(factory, type) and issubclass(factory, ResourceSessionFactory):
            return None
        if not hasattr(self, "_scores_state"):
            instance = factory()
            try:
                self._scores_state = getattr(instance, "rubric", None) is not None or callable(
                    getattr(instance, "verify", None))
            finally:
                instance.close()
        if self._scores_state:
            return None
        return (f"{self.options.environment} has neither a rubric nor verify: it scores no final state, so it "
                "cannot verify a synthesized task (TaskSynthesis not offered)")

    def derive_checker(
        self,
        initial_state: dict[str, Any],
        turns: Sequence[str],
        solution: Sequence[Sequence[ToolCall]],
        answers: Sequence[Sequence[str]],
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """The environment's verdicts on the candidate: the reward its reference calls earn in a fresh session
        (ValueError when a call fails or the reward is not a success) and the reward of doing nothing
        (ValueError when that already succeeds). With `strict=False` it never refuses."""
        calls = [c for turn in solution for c in turn]
        try:
            reference, idle = self._replayed(initial_state, calls, strict), self._replayed(initial_state, [], strict)
        except Exception:
            if strict:
                raise
            reference = idle = 0.0  # the no-verification ablation derives what it can and never refuses
        if strict and idle >= SUCCESS_REWARD:
            raise ValueError(f"doing nothing already earns reward {idle:.2f} from the environment's verify")
        if strict and reference < SUCCESS_REWARD:
            raise ValueError(f"the environment's verify gives the reference calls reward {reference:.2f}, below "
                             f"success ({SUCCESS_REWARD})")  # fmt: skip
        return {"answers": [list(a) for a in answers], "reference_reward": reference, "idle_reward": idle}

    def _replayed(self, arguments: dict[str, Any], calls: list[ToolCall], strict: bool) -> float:
        """The reward a fresh session gives after `calls` (ValueError naming the first call that fails)."""
        session = self._session()
        try:
            session.reset(dict(arguments), 0)
            transcript = []
            for call in calls:
                outcome = session.call(call.name, call.arguments)
                if strict and not outcome.ok:
                    raise ValueError(f"{call.name} failed: {outcome.error}")
                transcript.append({"role": "tool", "content": outcome.text})
            reward = session.reward(transcript)
            if reward is None and strict:
                raise ValueError("the environment reported no reward for the episode (no rubric, no verify): it "
                                 "cannot verify a synthesized task")  # fmt: skip
            return 0.0 if reward is None else reward
        finally:
            session.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("no episode in progress: call reset(task) first")
        return self._episode

    def _end_turn(self, episode: _Episode, answer: str | None, info: dict[str, Any]) -> StepResult:
        episode.replies[episode.turn] = answer
        episode.transcript.append({"role": "assistant", "content": answer or ""})
        episode.turn += 1
        episode.steps_in_turn = 0
        if episode.turn < len(episode.task.turns) and not episode.done:
            turn = {"role": "user", "content": episode.task.turns[episode.turn]}
            episode.transcript.append(turn)
            return StepResult(messages=[turn], done=False, turn_ended=True, info=info)
        episode.done = True
        return StepResult(messages=[], done=True, turn_ended=True, info=info)
