"""`ToolWorldEnv`: the built-in offline tool world (files, messages, calendar, shop, bank).

    from coevolve import envs
    env = envs.make("toolworld", seed=0)          # n_train=200, n_test=48, n_heldout=48, ...
    task = env.tasks("train")[0]
    obs = env.reset(task)                        # first user turn + tool schemas
    step = env.step('<tool_call>{"name": "get_balance", "arguments": {"account_id": "SAV-2"}}</tool_call>')
    step = env.step("The balance is 1520.00.")   # no tool syntax: the final answer of the turn
    print(env.evaluate())

A reply with tool calls (or tool-call parse errors) is executed call by call and answered with one `tool`
message each; a reply without tool syntax ends the user turn. A turn that has used `max_steps_per_turn`
tool-calling steps ends (with no answer) on the next one, whose calls are not run. Splits are generated
on first use and cached on the instance; each instance runs one episode at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import (
    Action,
    Environment,
    EnvOptions,
    Evaluation,
    FreshTasks,
    Observation,
    StepResult,
    Task,
    TaskSynthesis,
    check_options,
)
from coevolve.envs.toolworld.checker import ToolUse, build_checker, score
from coevolve.envs.toolworld.demonstrations import demonstrations
from coevolve.envs.toolworld.tasks import (
    GAP_SPLITS,
    SPLITS,
    gap_family_errors,
    generate_family_tasks,
    generate_split,
    templates_of,
)
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.envs.toolworld.world import World
from coevolve.llm.toolcalls import ParsedReply, parse_call_list, parse_tool_calls

ToolMode = Literal["involved", "all"]
TOOL_MODES = get_args(ToolMode)
MAX_SPLIT_TASKS = 5000
"""Most tasks a split may hold: the paper's benchmarks have a few thousand per split at most, the shipped
configs 200. A task takes about a millisecond to generate and a few kilobytes to hold, and a dry run builds
the training and held-out splits it checks (twice): at this bound about 20 s and 350 MB."""
EXCLUDED = {"train": (), "test": ("train",), "validation": ("train", "test"), "heldout-templates": (),
            "gap-validation": (), "gap-test": ("gap-validation",)}
"""Splits whose task ids a split never repeats."""


@dataclass
class _Episode:
    """The mutable state of the episode in progress."""

    task: Task
    world: World
    offered: tuple[str, ...]
    checker: dict[str, Any]
    replies: list[str | None]
    turn: int = 0
    steps_in_turn: int = 0
    use: ToolUse = ToolUse()
    """The agent's tool use so far (partial credit)."""
    done: bool = False


def read_action(action: Any) -> ParsedReply:
    """Calls, parse errors and plain text of an action (reply text or a list of calls); never raises."""
    return parse_tool_calls(action) if isinstance(action, str) else parse_call_list(action)


SplitSize = Annotated[int, Field(ge=0, le=MAX_SPLIT_TASKS)]


class ToolWorldOptions(EnvOptions):
    """The tool world's options, with their bounds (defaults: `ToolWorldEnv`'s signature)."""

    seed: int
    """Seeds the generated splits and tool docs."""
    n_train: SplitSize
    """Tasks of the `train` split."""
    n_test: SplitSize
    """Tasks of the `test` split (none of train's)."""
    n_heldout: SplitSize
    """Tasks of the `heldout-templates` split (families no other split has)."""
    n_validation: SplitSize
    """Tasks of the `validation` split (none of train's or test's)."""
    max_steps_per_turn: Annotated[int, Field(ge=1, le=1000)]
    """Tool-calling steps a user turn may take before it ends unanswered."""
    tools: ToolMode
    """`involved`: the tools of the task's apps are offered; `all`: every tool."""
    strict_arguments: bool
    """Refuse calls whose arguments do not match the tool's schema exactly."""
    gap_families: Annotated[tuple[str, ...], Field(max_length=100)]
    """The coverage gap: families of the `gap-validation`/`gap-test` splits only."""
    n_gap_validation: SplitSize
    """Tasks of the `gap-validation` split."""
    n_gap_test: SplitSize
    """Tasks of the `gap-test` split (none of gap-validation's)."""


class ToolWorldEnv(Environment, TaskSynthesis, FreshTasks):
    """One tool-world episode at a time; tasks and tool docs are generated per instance."""

    name = "toolworld"

    def __init__(
        self,
        seed: int = 0,
        n_train: int = 200,
        n_test: int = 48,
        n_heldout: int = 48,
        n_validation: int = 48,
        max_steps_per_turn: int = 6,
        tools: str = "involved",
        strict_arguments: bool = False,
        gap_families: Sequence[str] = (),
        n_gap_validation: int = 48,
        n_gap_test: int = 48,
    ) -> None:
        check_options(ToolWorldOptions, seed=seed, n_train=n_train, n_test=n_test, n_heldout=n_heldout,
                      n_validation=n_validation, max_steps_per_turn=max_steps_per_turn, tools=tools,
                      strict_arguments=strict_arguments, gap_families=gap_families,
                      n_gap_validation=n_gap_validation, n_gap_test=n_gap_test)  # fmt: skip
        errors = gap_family_errors(list(gap_families))
        if errors:
            raise ValueError(errors[0])
        self.seed, self.max_steps_per_turn, self.tool_mode = seed, max_steps_per_turn, tools
        self.gap_families = tuple(gap_families)
        """The coverage gap (`families_gap`): families of the `gap-validation`/`gap-test` splits only."""
        self._sizes = {"train": n_train, "test": n_test, "validation": n_validation, "heldout-templates": n_heldout,
                       "gap-validation": n_gap_validation, "gap-test": n_gap_test}
        self._catalog = ToolCatalog(strict_arguments=strict_arguments)
        self._splits: dict[str, list[Task]] = {}
        self._episode: _Episode | None = None

    # -- tasks -------------------------------------------------------------------------------------

    def splits(self) -> list[str]:
        return [*SPLITS, *(GAP_SPLITS if self.gap_families else ())]

    def tasks(self, split: str) -> list[Task]:
        """The tasks of `split`, generated on first use (test excludes every train task id, validation every
        train and test id)."""
        if split not in self._splits:
            templates_of(split, self.gap_families)  # validates the name
            exclude = {task.id for s in EXCLUDED[split] for task in self.tasks(s)}
            self._splits[split] = generate_split(self._catalog, self.seed, split, self._sizes[split], exclude,
                                                 self.gap_families)  # fmt: skip
        return list(self._splits[split])

    def fresh_tasks(self, families: list[str], n: int, stream: str) -> list[Task]:
        """`n` new tasks of the training or gap `families` from seed stream `stream`, none of any split."""
        taken = {task.id for split in self.splits() for task in self.tasks(split)}
        return generate_family_tasks(self._catalog, self.seed, families, n, stream, taken)

    def tool_schemas(self, task: Task) -> list[dict[str, Any]]:
        """The schemas offered for `task` (its apps' tools, or every tool with tools="all")."""
        return self._catalog.schemas(self._offered(World(task.initial_state)))

    def demonstrations(self) -> list[dict[str, str]]:
        """Two fixed example exchanges (8 chat messages) showing the tool-call format, taken from the
        apps of the current task first (any two before `reset`)."""
        apps = self._episode.task.initial_state if self._episode is not None else ()
        return demonstrations(self._catalog, apps)

    # -- episode -----------------------------------------------------------------------------------

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        """Start an episode of `task` (the world is deterministic, so `seed` changes nothing)."""
        if not task.turns:
            raise ValueError(f"task {task.id} has no user turns")
        world = World(task.initial_state)
        offered = self._offered(world)
        self._episode = _Episode(task, world, offered, self._checker_of(task), [None] * len(task.turns))
        return Observation(
            messages=[{"role": "user", "content": task.turns[0]}], tools=self._catalog.schemas(offered)
        )

    def step(self, action: Action) -> StepResult:
        """Run the tool calls of `action`, or take it as the turn's final answer; never raises on content."""
        episode = self._require_episode()
        if episode.done:
            return StepResult.episode_over(episode.turn)
        parsed = read_action(action)
        info: dict[str, Any] = {"calls": [], "parse_errors": list(parsed.errors), "turn": episode.turn}
        if not parsed.has_tool_syntax:
            return self._end_turn(episode, parsed.content, info)
        episode.steps_in_turn += 1
        if episode.steps_in_turn > self.max_steps_per_turn:
            return self._end_turn(episode, None, {**info, "step_limit": True})
        messages, use = [], episode.use
        for call in parsed.calls:
            outcome = self._catalog.call(episode.world.apps, call, episode.offered)
            use = replace(use, any_ok=use.any_ok or outcome.ok, called=use.called | {call.name})
            info["calls"].append(outcome.record())
            messages.append({"role": "tool", "content": outcome.content()})
        episode.use = replace(
            use, parsed=use.parsed + len(parsed.calls), malformed=use.malformed + len(parsed.errors)
        )
        messages += [
            {"role": "tool", "content": f"could not parse tool call: {error}"} for error in parsed.errors
        ]
        return StepResult(messages=messages, done=False, turn_ended=False, info=info)

    def evaluate(self) -> Evaluation:
        """Score the episode so far (unanswered turns count as missing answers)."""
        episode = self._require_episode()
        wanted = {call.name for calls in episode.task.solution for call in calls}
        return score(episode.checker, episode.world.state(), episode.replies, episode.use, wanted)

    def close(self) -> None:
        self._episode = None

    # -- state -------------------------------------------------------------------------------------

    def state_digest(self) -> str:
        """Content hash of the current world state."""
        return content_hash(self._require_episode().world.state())

    def derive_checker(
        self,
        initial_state: dict[str, Any],
        turns: Sequence[str],
        solution: Sequence[Sequence[ToolCall]],
        answers: Sequence[Sequence[str]],
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """The final state the solution leaves and the answers (`checker.build_checker`). The solution is
        run against the tools' documented arguments to the letter (unknown arguments fail), whatever this
        instance forgives an agent: a synthesized task's reference is held to the docs."""
        catalog = ToolCatalog(strict_arguments=True)
        return build_checker(catalog, initial_state, turns, solution, answers, strict=strict)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of the episode (task, world state, turn progress) for `restore`."""
        episode = self._require_episode()
        return {
            "task": episode.task.model_dump(mode="json"),
            "state": episode.world.state(),
            "turn": episode.turn,
            "steps_in_turn": episode.steps_in_turn,
            "replies": list(episode.replies),
            "use": {**asdict(episode.use), "called": sorted(episode.use.called)},
            "done": episode.done,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Continue the episode saved by `snapshot` (on this or another instance)."""
        task = Task.model_validate(snapshot["task"])
        self.reset(task)
        episode = self._require_episode()
        episode.world = World(snapshot["state"], loaded=frozenset(task.initial_state))
        episode.turn, episode.steps_in_turn = snapshot["turn"], snapshot["steps_in_turn"]
        episode.replies = list(snapshot["replies"])
        episode.use = ToolUse(**{**snapshot["use"], "called": frozenset(snapshot["use"]["called"])})
        episode.done = snapshot["done"]

    # -- helpers -----------------------------------------------------------------------------------

    def _require_episode(self) -> _Episode:
        if self._episode is None:
            raise RuntimeError("no episode in progress: call reset(task) first")
        return self._episode

    def _offered(self, world: World) -> tuple[str, ...]:
        return tuple(self._catalog.names(None if self.tool_mode == "all" else world.loaded))

    def _checker_of(self, task: Task) -> dict[str, Any]:
        """The task's checker spec; computed from the reference solution when it has no final state."""
        if "final_state" in task.checker:
            return task.checker
        if task.solution is None:
            raise ValueError(f"task {task.id} has neither checker.final_state nor a solution")
        answers = task.checker.get("answers") or [[] for _ in task.turns]
        return build_checker(self._catalog, task.initial_state, task.turns, task.solution, answers)

    def _end_turn(self, episode: _Episode, answer: str | None, info: dict[str, Any]) -> StepResult:
        """Record the turn's final answer and move to the next user turn, or end the episode."""
        episode.replies[episode.turn] = answer
        episode.turn += 1
        episode.steps_in_turn = 0
        if episode.turn < len(episode.task.turns):
            return StepResult(
                messages=[{"role": "user", "content": episode.task.turns[episode.turn]}],
                done=False,
                turn_ended=True,
                info=info,
            )
        episode.done = True
        return StepResult(messages=[], done=True, turn_ended=True, info=info)
