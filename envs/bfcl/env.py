"""`BfclEnv`: BFCL v4 multi-turn tasks (bfcl-eval 2026.3.23) on our own executor, scored by BFCL's rule.

    from coevolve import envs
    env = envs.make("bfcl")                      # category="base" | "miss_func" | "miss_param" | "long_context"
    task = env.tasks("ae-test")[0]               # splits: all, ae-train, ae-test, train, test
    obs = env.reset(task)                        # first user turn + the involved classes' tools
    env.step("[cd(folder='document'), mkdir(dir_name='temp')]")      # BFCL python-list format, or
    env.step('<tool_call>{"name": "ls", "arguments": {}}</tool_call>')  # Hermes JSON, or a list of calls
    env.step("Done.")                            # no calls: the turn ends, the next user turn comes
    print(env.evaluate())                        # reward 1.0 / 0.0 by BFCL's multi-turn checker

The episode follows the official harness: each turn appends its user message; a reply with calls runs
them in order on the episode's own backend instances (one `tool` message per call, plus one per parse
error); a reply without tool syntax ends the turn; a turn's 21st tool step (more than
`max_steps_per_turn` = 20) is executed and then force-quits the whole task, which fails unless it was the
last turn. In miss_func tasks the held-out functions' docs arrive with their turn (in the message text
and in `info["tools_added"]`); like the harness we still execute them if called earlier.

`evaluate()` re-executes the decoded steps and the ground truth on fresh instances (`checker.check_turns`).
Reward is 1.0 on success, else 0.0; with `partial_credit=True` a failed episode gets
`PARTIAL_CREDIT_SCALE * turn_fraction` (at most 0.4, so never a success). `details` always carries
`turn_fraction`, the first failure, the BFCL id and the bfcl-eval version.

Options: `category`, `seed` (of the stratified train/test split), `max_steps_per_turn` (20 as in BFCL),
`partial_credit`, `check_types` (default True: an argument whose JSON type differs from the docs is an
error observation; False passes it to the backend as the harness does. One ground-truth call in
miss_func / miss_param / long_context, `close_ticket(ticket_id='ticket_001')`, breaks its own docs; it is
an error either way, and the checker runs model and ground truth through the same executor).

Differences from the official harness, none of which changes its verdict on well-formed calls: calls are
looked up in a dict (never `eval`); arguments must be literals (no nested calls) of bounded size, and a
few numeric ones are bounded (`backends.RESOURCE_LIMITS`); positional arguments are named by the
backend's signature (as `eval` would bind them; only `purchase_insurance` documents another order); a
reply whose tool syntax is malformed gets error messages and the turn goes on (the harness ends the turn),
but it is not a decoded step for the checker; Hermes replies keep `llm.toolcalls`' cap of 16 calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

import coevolve.envs.bfcl.data as data
from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import (
    Action,
    Environment,
    EnvOptions,
    Evaluation,
    Observation,
    StepResult,
    Task,
    TaskSynthesis,
    as_tool_calls,
    check_options,
)
from coevolve.envs.bfcl.backends import Backends, Scenario, backend_class, public_methods
from coevolve.envs.bfcl.checker import check_turns
from coevolve.envs.bfcl.parsing import parse_call_string, read_action
from coevolve.envs.bfcl.state import public_state

MAX_STEPS_PER_TURN = 20
PARTIAL_CREDIT_SCALE = 0.4


class BfclOptions(EnvOptions):
    """BFCL's options, with their bounds (defaults: `BfclEnv`'s signature)."""

    category: str
    """BFCL multi-turn category (`base`, `miss_func`, ...; `data.category_name`)."""
    seed: int
    """Seeds the split of the category's tasks (`data.select_split`)."""
    max_steps_per_turn: Annotated[int, Field(ge=1, le=1000)]
    """Tool-calling steps a user turn may take before it ends."""
    partial_credit: bool
    """Reward a failed episode for the turns it got right (scaled by `PARTIAL_CREDIT_SCALE`)."""
    check_types: bool
    """Refuse calls whose argument types do not match the function's docs."""


@dataclass(frozen=True)
class _ClassInfo:
    """What the environment derives from one backend class and its docs."""

    schemas: list[dict[str, Any]]
    param_types: dict[str, dict[str, str]]
    signatures: dict[str, tuple[str, ...]]


@dataclass
class _Episode:
    """The mutable state of the episode in progress."""

    task: Task
    scenario: Scenario
    backends: Backends
    missed: dict[int, list[str]]
    signatures: dict[str, tuple[str, ...]]
    turns: list[list[list[ToolCall]]] = field(default_factory=list)
    """Decoded steps (non-empty call lists) of every ended turn."""
    current: list[list[ToolCall]] = field(default_factory=list)
    turn: int = 0
    steps_in_turn: int = 0
    force_quit: bool = False
    done: bool = False


class BfclEnv(Environment, TaskSynthesis):
    """One BFCL multi-turn episode at a time; tasks, docs and backends come from the bfcl-eval package."""

    name = "bfcl"

    def __init__(
        self,
        category: str = "base",
        seed: int = 0,
        max_steps_per_turn: int = MAX_STEPS_PER_TURN,
        partial_credit: bool = False,
        check_types: bool = True,
    ) -> None:
        check_options(BfclOptions, category=category, seed=seed, max_steps_per_turn=max_steps_per_turn,
                      partial_credit=partial_credit, check_types=check_types)
        self.category = data.category_name(category)
        self.seed, self.max_steps_per_turn, self.partial_credit = seed, max_steps_per_turn, partial_credit
        self.check_types = check_types
        self.version = data.bfcl_version()
        self._tasks: list[Task] | None = None
        self._classes: dict[str, _ClassInfo] = {}
        self._episode: _Episode | None = None

    # -- tasks -------------------------------------------------------------------------------------

    def splits(self) -> list[str]:
        return list(data.SPLITS)

    def tasks(self, split: str) -> list[Task]:
        """The 200 tasks of the category, or a split of them (see `data.select_split`)."""
        if split not in data.SPLITS:
            raise ValueError(f"unknown split {split!r}; available: {', '.join(data.SPLITS)}")
        if self._tasks is None:
            self._tasks = self._load_tasks()
        return data.select_split(self._tasks, split, self.seed)

    def _load_tasks(self) -> list[Task]:
        answers = data.load_answers(self.category)
        tasks = []
        for entry in data.load_entries(self.category):
            classes = entry["involved_classes"]
            schemas = {s["function"]["name"]: s for s in self._schemas(classes)}
            signatures = self._signatures(classes)
            tasks.append(data.build_task(entry, answers[entry["id"]], self.category, signatures, schemas))
        return tasks

    def tool_schemas(self, task: Task) -> list[dict[str, Any]]:
        """The tools offered at the start of `task` (its classes' functions minus held-out ones)."""
        held_out = {
            name for names in (task.initial_state.get("missed_function") or {}).values() for name in names
        }
        return [
            s
            for s in self._schemas(Scenario.of(task.initial_state).involved_classes)
            if s["function"]["name"] not in held_out
        ]

    # -- episode -----------------------------------------------------------------------------------

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        """Start an episode of `task` on fresh backends (deterministic: `seed` changes nothing)."""
        if not task.turns:
            raise ValueError(f"task {task.id} has no user turns")
        scenario = Scenario.of(task.initial_state)
        missed = {int(t): list(n) for t, n in (task.initial_state.get("missed_function") or {}).items()}
        signatures = self._signatures(scenario.involved_classes)
        self._episode = _Episode(task, scenario, self._backends(scenario), missed, signatures)
        return Observation(
            messages=[{"role": "user", "content": task.turns[0]}], tools=self.tool_schemas(task)
        )

    def step(self, action: Action) -> StepResult:
        """Run the calls of `action`, or take it as the end of the turn; never raises on content."""
        episode = self._require_episode()
        if episode.done:
            return StepResult.episode_over(episode.turn)
        parsed = read_action(action, episode.signatures)
        info: dict[str, Any] = {"calls": [], "parse_errors": list(parsed.errors), "turn": episode.turn}
        if not parsed.has_tool_syntax:
            return self._end_turn(episode, info, [])
        episode.steps_in_turn += 1
        messages = []
        for call in parsed.calls:
            outcome = episode.backends.run(call)
            info["calls"].append(outcome.record())
            messages.append({"role": "tool", "content": _encodable(outcome.content)})
        messages += [
            {"role": "tool", "content": _encodable(f"could not parse tool call: {e}")} for e in parsed.errors
        ]
        if parsed.calls:
            episode.current.append(list(parsed.calls))
        if episode.steps_in_turn > self.max_steps_per_turn:
            episode.force_quit = True
            return self._end_turn(episode, {**info, "step_limit": True}, messages)
        return StepResult(messages=messages, done=False, turn_ended=False, info=info)

    def evaluate(self) -> Evaluation:
        """Score the episode by BFCL's rule (turns not yet ended count as missing)."""
        episode = self._require_episode()
        types = self._param_types(episode.scenario.involved_classes) if self.check_types else None
        verdict = check_turns(episode.scenario, episode.turns, self._truth(episode), types)
        partial = PARTIAL_CREDIT_SCALE * verdict.turn_fraction if self.partial_credit else 0.0
        details = {
            "bfcl_id": episode.task.checker.get("bfcl_id", ""),
            "bfcl_version": self.version,
            "turn_fraction": verdict.turn_fraction,
            "turns_checked": verdict.turns_checked,
            "turns_passed": verdict.turns_passed,
            "failure": verdict.failure,
            "force_quit": episode.force_quit,
        }
        return Evaluation(
            reward=1.0 if verdict.success else partial, success=verdict.success, details=details
        )

    def close(self) -> None:
        self._episode = None

    # -- state -------------------------------------------------------------------------------------

    def state_digest(self) -> str:
        """Content hash of the public attributes of the episode's instances (what the checker compares)."""
        return content_hash(public_state(self._require_episode().backends.instances))

    def derive_checker(
        self,
        initial_state: dict[str, Any],
        turns: Sequence[str],
        solution: Sequence[Sequence[ToolCall]],
        answers: Sequence[Sequence[str]],
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """A checker without `ground_truth`: `evaluate` then checks an episode against the task's own
        solution, by BFCL's rule. Nothing to derive, so nothing is refused here (a solution that fails is
        caught by replaying it)."""
        return {"category": "synthesized", "answers": list(answers)}

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able record of the episode (task and decoded steps) that `restore` replays."""
        episode = self._require_episode()
        return {
            "task": episode.task.model_dump(mode="json"),
            "turns": [_dumped(turn) for turn in episode.turns],
            "current": _dumped(episode.current),
            "turn": episode.turn,
            "steps_in_turn": episode.steps_in_turn,
            "force_quit": episode.force_quit,
            "done": episode.done,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Continue a snapshotted episode: replay its steps on fresh instances (the backends are deterministic)."""
        self.reset(Task.model_validate(snapshot["task"]))
        episode = self._require_episode()
        episode.turns = [[as_tool_calls(step) for step in turn] for turn in snapshot["turns"]]
        episode.current = [as_tool_calls(step) for step in snapshot["current"]]
        for step in [s for turn in episode.turns for s in turn] + episode.current:
            for call in step:
                episode.backends.run(call)
        episode.turn, episode.steps_in_turn = snapshot["turn"], snapshot["steps_in_turn"]
        episode.force_quit, episode.done = snapshot["force_quit"], snapshot["done"]

    # -- helpers -----------------------------------------------------------------------------------

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("no episode in progress: call reset(task) first")
        return self._episode

    def _end_turn(
        self, episode: _Episode, info: dict[str, Any], messages: list[dict[str, str]]
    ) -> StepResult:
        """Close the current turn; hand over the next user turn, or end the episode."""
        episode.turns.append(episode.current)
        episode.current, episode.steps_in_turn = [], 0
        episode.turn += 1
        if episode.force_quit or episode.turn >= len(episode.task.turns):
            episode.done = True
            return StepResult(messages=messages, done=True, turn_ended=True, info=info)
        added = episode.missed.get(episode.turn)
        if added:
            schemas = {s["function"]["name"]: s for s in self._schemas(episode.scenario.involved_classes)}
            info["tools_added"] = [schemas[name] for name in added if name in schemas]
        messages = [*messages, {"role": "user", "content": episode.task.turns[episode.turn]}]
        return StepResult(messages=messages, done=False, turn_ended=True, info=info)

    def _truth(self, episode: _Episode) -> list[list[ToolCall]]:
        """Ground-truth calls per turn: the checker's BFCL strings when present, else the task's solution."""
        strings = episode.task.checker.get("ground_truth")
        if strings is None:
            if episode.task.solution is None:
                raise ValueError(f"task {episode.task.id} has neither checker.ground_truth nor a solution")
            return [list(turn) for turn in episode.task.solution]
        return [[parse_call_string(call, episode.signatures) for call in turn] for turn in strings]

    def _class(self, class_name: str) -> _ClassInfo:
        """Docs, tool schemas, documented types and signatures of one class, read once per instance."""
        if class_name not in self._classes:
            docs = data.load_docs(class_name)
            methods = public_methods(backend_class(class_name))
            self._classes[class_name] = _ClassInfo(
                schemas=[data.tool_schema(doc) for doc in docs],
                param_types=data.param_types(docs),
                signatures={name: tuple(sig.parameters) for name, sig in methods.items()},
            )
        return self._classes[class_name]

    def _schemas(self, classes: Iterable[str]) -> list[dict[str, Any]]:
        return [schema for name in classes for schema in self._class(name).schemas]

    def _param_types(self, classes: Iterable[str]) -> dict[str, dict[str, str]]:
        return {k: v for name in classes for k, v in self._class(name).param_types.items()}

    def _signatures(self, classes: Iterable[str]) -> dict[str, tuple[str, ...]]:
        return {k: v for name in classes for k, v in self._class(name).signatures.items()}

    def _backends(self, scenario: Scenario) -> Backends:
        types = self._param_types(scenario.involved_classes) if self.check_types else None
        return Backends(scenario, types)


def _dumped(steps: list[list[ToolCall]]) -> list[list[dict[str, Any]]]:
    return [[call.model_dump(mode="json") for call in step] for step in steps]


def _encodable(text: str) -> str:
    """`text` with lone surrogates escaped, so the chat template can encode every observation as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
