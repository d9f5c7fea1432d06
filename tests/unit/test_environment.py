"""The `Environment` roles: the required ones (task source, episodes) and their hooks' defaults, the optional
ones (`TaskSynthesis`, `FreshTasks`) each environment offers, and wrappers (`EnvironmentWrapper`,
`ContextEnv`) that change only what they define and offer exactly their inner environment's roles."""

from __future__ import annotations

import pytest

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.base import (
    Action,
    Environment,
    EnvironmentWrapper,
    Evaluation,
    FreshTasks,
    Observation,
    StepResult,
    Task,
    TaskSynthesis,
)
from coevolve.stages.explore.exploration import ContextEnv
from coevolve.stages.verify.candidates import Rejected, candidate_task
from tests.unit.tool_world import SMALL, bank_task


class CountingEnv(Environment):
    """The least an environment implements: a one-turn episode that counts its steps."""

    name = "counting"

    def __init__(self) -> None:
        self.steps = 0

    def splits(self) -> list[str]:
        return ["train"]

    def tasks(self, split: str) -> list[Task]:
        return [Task(id="t", env=self.name, split=split, turns=["Count."])]

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        self.steps = 0
        return Observation(messages=[{"role": "user", "content": task.turns[0]}], tools=[])

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        return StepResult(messages=[], done=True, turn_ended=True, info={"steps": self.steps})

    def evaluate(self) -> Evaluation:
        return Evaluation(reward=1.0, success=True)

    def close(self) -> None:
        pass


def test_the_optional_methods_have_documented_defaults():
    env = CountingEnv()
    env.reset(env.tasks("train")[0])
    assert env.state_digest() is None and env.demonstrations() == []
    pending = env.submit_step("one")
    assert env.steps == 0  # an in-process step runs when it is waited for
    assert pending().info == {"steps": 1} and env.steps == 1


def test_an_environment_offers_only_the_roles_it_implements_and_verification_says_so():
    env = CountingEnv()
    assert not env.offers(TaskSynthesis) and not env.offers(FreshTasks) and not hasattr(env, "derive_checker")
    row = {"solution": "[]", "initial_state": "{}", "query": "Count.", "answers": "[]", "env": "counting"}
    with pytest.raises(Rejected, match="^replay: no verifiable checker for environment 'counting'"):
        candidate_task(env, row)
    toolworld, bfcl = envs.make("toolworld", **SMALL), envs.make("bfcl")
    assert toolworld.offers(TaskSynthesis) and toolworld.offers(FreshTasks)
    assert bfcl.offers(TaskSynthesis) and not bfcl.offers(FreshTasks)


def test_a_wrapper_forwards_every_method_the_base_defines_so_no_default_shadows_the_inner_one():
    """A hook added to `Environment` with a default, and not forwarded, would answer the default for any
    wrapped environment (a remote one's state digests would all be None)."""
    own = {name for name, value in vars(Environment).items() if callable(value) and not name.startswith("_")}
    assert own <= set(vars(EnvironmentWrapper)), own - set(vars(EnvironmentWrapper))
    wrapped = EnvironmentWrapper(envs.make("toolworld", **SMALL))
    assert wrapped.offers(TaskSynthesis) and wrapped.offers(FreshTasks)
    assert not EnvironmentWrapper(CountingEnv()).offers(TaskSynthesis)
    call = ToolCall(name="get_balance", arguments={"account": "SAV-1", "nested": {"n": 3}})
    assert wrapped.argument_literals(call) == ["SAV-1", 3]  # the inner environment's role method


def test_an_environment_without_a_required_method_cannot_be_built():
    methods = {name: getattr(CountingEnv, name) for name in ("splits", "tasks", "reset", "step", "close")}
    no_evaluate = type("NoEvaluate", (Environment,), {"name": "broken", **methods})
    with pytest.raises(TypeError, match="evaluate"):
        no_evaluate()


def test_every_registered_environment_is_an_environment():
    from coevolve.envs.appworld.env import AppWorldEnv

    assert isinstance(envs.make("toolworld", **SMALL), Environment) and isinstance(envs.make("bfcl"), Environment)
    assert isinstance(AppWorldEnv(), Environment)  # its checker derivation: tests/unit/test_appworld_synthesized.py


def test_the_tool_world_derives_a_checker_by_replaying_the_solution_to_the_letter():
    env = envs.make("toolworld", **SMALL)  # lenient with an agent's unknown arguments
    task = bank_task(env)
    (call,) = task.solution[0]
    answers = task.checker["answers"]
    checker = env.derive_checker(task.initial_state, task.turns, task.solution, answers)
    assert set(checker) == {"final_state", "answers"} and checker["answers"] == answers
    extra = ToolCall(name=call.name, arguments={**call.arguments, "pin": "1234"})
    with pytest.raises(ValueError, match="^reference call get_balance"):
        env.derive_checker(task.initial_state, task.turns, [[extra]], answers)  # held to the docs
    lenient = env.derive_checker(task.initial_state, task.turns, [[extra]], [["not shown"]], strict=False)
    assert lenient["answers"] == [[]]  # the no-verification ablation drops what nobody could see


def test_bfcl_checks_a_synthesized_task_against_its_own_solution():
    env = envs.make("bfcl")
    task = env.tasks("ae-train")[0]
    checker = env.derive_checker(task.initial_state, task.turns[:1], task.solution[:1], [["x"]])
    assert checker == {"category": "synthesized", "answers": [["x"]]}


def test_a_context_environment_adds_the_instructions_and_delegates_the_rest():
    inner = envs.make("toolworld", **SMALL)
    task = bank_task(inner)
    env = ContextEnv(inner, {task.id: "Explore the bank."})
    assert env.name == "toolworld" and env.splits() == inner.splits()
    obs = env.reset(task)
    assert obs.messages[0] == {"role": "system", "content": "Explore the bank."}
    assert env.demonstrations() == inner.demonstrations() and env.state_digest() == inner.state_digest()
    (call,) = task.solution[0]
    assert env.submit_step([call])().info["calls"][0]["ok"]
    assert env.derive_checker(task.initial_state, task.turns, task.solution, task.checker["answers"]) == \
        inner.derive_checker(task.initial_state, task.turns, task.solution, task.checker["answers"])
    assert env.evaluate() == inner.evaluate()
    env.close()
    with pytest.raises(RuntimeError, match="no episode"):
        inner.evaluate()
