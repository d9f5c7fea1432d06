"""The environment interface every CoEvolve environment implements.

An environment owns the state of one episode at a time: `reset(task)` starts it, `step(action)` feeds it
the agent's reply (raw text, parsed by the environment, or a list of already-parsed tool calls),
`evaluate()` scores the episode, `close()` frees it. Rollout, exploration and verification create one
instance per concurrent episode through `envs.make(name, **options)`, so no state is shared between
episodes and nothing lives in module globals.

Roles. `Environment` is what every environment implements: the task source (`splits`, `tasks`) and the
episodes (`reset`, `step`, `evaluate`, `close`, and three hooks with a documented default an environment
overrides where it can do better: `submit_step`, `state_digest`, `demonstrations`). Two roles are
optional, each a base class an environment adds where it offers it: `TaskSynthesis` (a synthesized task's
checker derived from its solution, `derive_checker`; what a call needs to be made, `argument_literals`),
without which verification admits none of its candidates, and `FreshTasks` (new tasks of a family,
`fresh_tasks`), which only the learning benchmark's oracle curriculum needs. Callers ask
`env.offers(Role)` before using one. `EnvironmentWrapper` is an environment around another that changes
only what it defines and offers exactly the roles of the one it wraps.

Options. An environment declares the options its constructor takes (`env.options` of a run config) in an
`EnvOptions` model with their types and bounds and checks them first (`check_options`): a size out of bounds
is one `OptionError` line naming `env.options.<field>`, before any task set is built in proportion to it.

Tasks are plain data (`Task`), identified by a content hash, so the same task generated twice has the same
id and re-running a stage produces the same rows.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coevolve.core import ToolCall, content_hash

TaskSource = Literal["benchmark", "seed", "synthesized"]


SYNTHESIZED = "synth:"
"""The family of a synthesized task: this prefix and the tools its solution calls, `synth:get_order+pay`."""


def synthesized_family(tools: Sequence[str]) -> str:
    """The family of a synthesized task whose solution calls `tools` (each named once, in order)."""
    return SYNTHESIZED + "+".join(dict.fromkeys(tools))


def family_tools(family: str) -> list[str] | None:
    """The tools a synthesized task's family names; None for any other family."""
    return family.removeprefix(SYNTHESIZED).split("+") if family.startswith(SYNTHESIZED) else None


Action = str | list[ToolCall] | list[dict[str, Any]]
"""What the agent sends to `step`: its raw reply text, or tool calls (`[]` = a final reply with no text)."""


class EnvOptions(BaseModel):
    """The options an environment's constructor takes (`env.options` of a run config), each with its type
    and bounds: a subclass per environment, one field per constructor argument, checked by `check_options`
    before anything is built. A size is bounded so that a config cannot ask for a task set that takes
    minutes and gigabytes to generate (a dry run builds the splits it checks)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False,
                              arbitrary_types_allowed=True)


class OptionError(ValueError):
    """An environment option of the wrong type or out of its bounds; the message is one line naming
    `env.options.<field>` and what it may be."""


def check_options(options_model: type[EnvOptions], **values: Any) -> EnvOptions:
    """`values` validated by `options_model`, or `OptionError` naming the first bad option and its bound:
    `env.options.n_train: input should be less than or equal to 5000 (got 1000000000)`."""
    try:
        return options_model.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        said = error["msg"][:1].lower() + error["msg"][1:]
        raise OptionError(f"env.options.{field}: {said} (got {error['input']!r})") from None


class Task(BaseModel):
    """One task: where the episode starts, what the user says per turn, and how success is checked."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Content hash of env, initial state, turns and checker; equal content gives an equal id."""
    env: str
    """Name of the environment the task belongs to (`envs.make(env)`)."""
    split: str
    """Split the task was drawn from (`train`, `test`, ...); `synthesized` for evolved tasks."""
    family: str = ""
    """Template family or benchmark category; held-out splits are disjoint from training families."""
    initial_state: dict[str, Any] = Field(default_factory=dict)
    """Environment-specific initial state / config the episode is loaded from."""
    turns: list[str]
    """User messages, one per turn."""
    solution: list[list[ToolCall]] | None = None
    """Reference solution: tool calls per turn, when known."""
    checker: dict[str, Any] = Field(default_factory=dict)
    """Environment-specific checker spec (expected final state, required answer values, ...)."""
    source: TaskSource = "benchmark"
    """Where the task came from."""
    lineage: dict[str, str] = Field(default_factory=dict)
    """Ids of the rows that produced the task (signal, exploration, candidate, verification)."""

    @staticmethod
    def make_id(env: str, initial_state: Any, turns: list[str], checker: Any) -> str:
        return content_hash({"env": env, "state": initial_state, "turns": turns, "checker": checker})

    def to_row(self) -> dict[str, Any]:
        """The task as a `tasks` artifact row (nested payloads as JSON text)."""
        solution = None if self.solution is None else [[c.model_dump() for c in turn] for turn in self.solution]
        return {
            "task_id": self.id, "env": self.env, "split": self.split, "family": self.family,
            "source": self.source, "turns": json.dumps(self.turns), "initial_state": json.dumps(self.initial_state),
            "solution": None if solution is None else json.dumps(solution),
            "checker": json.dumps(self.checker), "lineage": json.dumps(self.lineage),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        """The task a `tasks` artifact row holds."""
        solution = row["solution"]
        return cls(
            id=row["task_id"], env=row["env"], split=row["split"], family=row["family"], source=row["source"],
            turns=json.loads(row["turns"]), initial_state=json.loads(row["initial_state"]),
            solution=None if solution is None else [[ToolCall(**c) for c in t] for t in json.loads(solution)],
            checker=json.loads(row["checker"]), lineage=json.loads(row["lineage"]),
        )


class Observation(BaseModel):
    """What the agent sees after `reset`: the conversation so far and the tools it may call."""

    messages: list[dict[str, str]]
    """Chat messages (`role`, `content`): normally the first user turn (a system prompt is the engine's)."""
    tools: list[dict[str, Any]]
    """Tool schemas in OpenAI function format: {"type": "function", "function": {name, description, parameters}}."""


class StepResult(BaseModel):
    """What one `step` returns: new messages to append and whether the turn or episode ended."""

    messages: list[dict[str, str]]
    """New messages for the agent: `tool` results of the calls, or the next `user` turn."""
    done: bool
    """The episode is over; call `evaluate()`."""
    turn_ended: bool
    """The agent's reply closed the current user turn (it made no tool calls, or the step cap was hit)."""
    info: dict[str, Any] = Field(default_factory=dict)
    """Details for the ledger: parsed `calls` (list of {name, arguments}), `errors` per call, ..."""

    @classmethod
    def episode_over(cls, turn: int) -> StepResult:
        """What `step` returns when called after the episode ended: nothing happens."""
        info = {"calls": [], "parse_errors": [], "turn": turn, "episode_over": True}
        return cls(messages=[], done=True, turn_ended=False, info=info)


class Evaluation(BaseModel):
    """The episode's score. Success is reward >= 0.5 (the paper's convention)."""

    reward: float
    success: bool
    details: dict[str, Any] = Field(default_factory=dict)
    progress: float | None = None
    """How much of the task's outcome the episode achieved, in [0, 1], where the reward also pays for how
    the episode went (the tool world's credit for calls that ran or parsed); None: the reward is all outcome."""

    @property
    def outcome_credit(self) -> float:
        """`progress` where the environment reports it, else the reward: what the paper's "positive
        reward" measures (a partly done task), never credit for merely calling a tool."""
        return self.reward if self.progress is None else self.progress


class Environment(ABC):
    """One episode at a time of a tool-use environment: the task source and the episode roles (see the
    module docstring for the optional ones)."""

    name: str
    """The name `envs.make` knows the environment by (a class attribute)."""

    # -- task source ---------------------------------------------------------------------------------

    @abstractmethod
    def splits(self) -> list[str]:
        """Names of the task splits `tasks` accepts."""

    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """The tasks of `split` (ValueError for an unknown split)."""

    # -- episodes ------------------------------------------------------------------------------------

    @abstractmethod
    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        """Start an episode of `task`, dropping any episode in progress."""

    @abstractmethod
    def step(self, action: Action) -> StepResult:
        """Feed the agent's reply to the episode; content the environment cannot run is an error message,
        never an exception."""

    @abstractmethod
    def evaluate(self) -> Evaluation:
        """Score the episode so far."""

    @abstractmethod
    def close(self) -> None:
        """Free the episode's resources; the instance may `reset` again."""

    def submit_step(self, action: Action) -> Callable[[], StepResult]:
        """Start `step(action)`; the returned function waits for its result. The agent loop submits every
        live episode's step before waiting for any, so environments that step elsewhere (Ray actors,
        `executors.ray_envs`) step in parallel. By default the step runs, in this process, when the
        returned function is called."""
        return functools.partial(self.step, action)

    def state_digest(self) -> str | None:
        """A content hash of the episode's current state: equal digests, equal states. Triples and
        verification compare the digests before and after calls to tell a read-only call from one that
        acts. None (the default): the environment cannot tell, and nothing is concluded from it."""
        return None

    def demonstrations(self) -> list[dict[str, str]]:
        """Example chat messages shown to the agent ahead of the conversation (prompt tokens, no loss),
        e.g. exchanges in the tool-call format. By default there are none."""
        return []

    # -- optional roles ------------------------------------------------------------------------------

    def offers(self, role: type) -> bool:
        """Whether this environment offers the optional `role` (`TaskSynthesis`, `FreshTasks`)."""
        return isinstance(self, role)


class TaskSynthesis(ABC):
    """The role of an environment whose synthesized tasks can be verified: a checker derived from a
    task's solution, and the values each call needs. Without it, verification discards every candidate
    (`replay: no verifiable checker`)."""

    @abstractmethod
    def derive_checker(
        self,
        initial_state: dict[str, Any],
        turns: Sequence[str],
        solution: Sequence[Sequence[ToolCall]],
        answers: Sequence[Sequence[str]],
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """The checker spec (`Task.checker`) of a synthesized task: its initial state, user turns,
        reference solution (calls per turn) and required answer values (per turn). Raises ValueError when
        the solution fails (a call that does not run, an answer no result shows); with `strict=False`
        (the no-verification ablation) it never refuses and derives what it can."""

    def argument_literals(self, call: ToolCall) -> list[Any]:
        """The values an agent must know to make `call`: verification's `solvable` check wants each in the
        task's query or an earlier result. By default the scalars of its JSON arguments; an environment
        whose argument is code names the literals inside the code."""
        return literal_values(call.arguments)


class FreshTasks(ABC):
    """The role of an environment that generates new tasks of a family (the learning benchmark's oracle
    curriculum draws them)."""

    @abstractmethod
    def fresh_tasks(self, families: list[str], n: int, stream: str) -> list[Task]:
        """`n` new tasks of the given families from the seed stream `stream`, none of any split. A
        synthesized task's family (`synth:<tools>`) stands for the generator's families whose tasks call
        those tools."""


class EnvironmentWrapper(Environment):
    """An environment around another (`inner`) that changes only what a subclass defines. It offers
    exactly the roles of the environment it wraps: their methods (and any other attribute, such as
    `tool_schemas`) are the inner one's, reached by name; `Environment`'s own methods are forwarded here
    one by one (a default inherited from the base would shadow the inner one's)."""

    def __init__(self, inner: Environment) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def splits(self) -> list[str]:
        return self.inner.splits()

    def tasks(self, split: str) -> list[Task]:
        return self.inner.tasks(split)

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        return self.inner.reset(task, seed=seed)

    def step(self, action: Action) -> StepResult:
        return self.inner.step(action)

    def evaluate(self) -> Evaluation:
        return self.inner.evaluate()

    def close(self) -> None:
        self.inner.close()

    def submit_step(self, action: Action) -> Callable[[], StepResult]:
        return self.inner.submit_step(action)

    def state_digest(self) -> str | None:
        return self.inner.state_digest()

    def demonstrations(self) -> list[dict[str, str]]:
        return self.inner.demonstrations()

    def offers(self, role: type) -> bool:
        return self.inner.offers(role)


def literal_values(value: Any) -> list[Any]:
    """The scalar values of a JSON value, depth first (None and booleans left out)."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in literal_values(v)]
    if isinstance(value, list):
        return [x for v in value for x in literal_values(v)]
    return [] if value is None or isinstance(value, bool) else [value]


def as_tool_calls(action: list[ToolCall] | list[dict[str, Any]]) -> list[ToolCall]:
    """Normalise a list of calls given as dicts or `ToolCall`s."""
    return [c if isinstance(c, ToolCall) else ToolCall(**c) for c in action]
