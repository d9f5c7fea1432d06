"""The tool world's checker is strict: a stray mutation, a wrong argument or a missing answer fails, and a
random policy almost never succeeds."""

from __future__ import annotations

import random
import re

import pytest

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.answers import answer_found
from coevolve.envs.replay import replay_reference
from coevolve.envs.toolworld.checker import money
from tests.unit.tool_world import one_task_per_family


@pytest.fixture(scope="module")
def env():
    return envs.make("toolworld", seed=0)


def _perturb(state: dict, rng: random.Random) -> None:
    """Change one leaf of the state (or add an entry to an empty table)."""
    node = state[rng.choice(sorted(state))]
    while True:
        keys = [k for k, v in node.items() if isinstance(v, dict | str | int | float)]
        if not keys:
            node["X-99"] = {"note": "stray"}
            return
        key = rng.choice(sorted(keys))
        if not isinstance(node[key], dict):
            node[key] = node[key] + ("x" if isinstance(node[key], str) else 1)
            return
        node = node[key]


def test_extra_mutation_fails_every_family(env):
    rng = random.Random(0)
    for family, task in one_task_per_family(env).items():
        assert replay_reference(env, task).success
        snapshot = env.snapshot()
        _perturb(snapshot["state"], rng)
        env.restore(snapshot)
        evaluation = env.evaluate()
        assert not evaluation.success and evaluation.reward < 0.5, family
        assert evaluation.details["mismatched_apps"], family


def _mutating_call_index(env, task) -> tuple[int, int] | None:
    env.reset(task)
    for turn, calls in enumerate(task.solution):
        for index, call in enumerate(calls):
            before = env.state_digest()
            env.step([call])
            if env.state_digest() != before:
                return turn, index
        env.step("ok")
    return None


def _wrong(value):
    return value + "x" if isinstance(value, str) else value + 1


def test_wrong_argument_in_a_mutating_call_fails(env):
    checked = 0
    for family, task in one_task_per_family(env).items():
        position = _mutating_call_index(env, task)
        if position is None:  # read-only family: covered by the answer tests
            continue
        turn, index = position
        solution = [list(calls) for calls in task.solution]
        call = solution[turn][index]
        name = sorted(call.arguments)[0]
        solution[turn][index] = ToolCall(
            name=call.name, arguments={**call.arguments, name: _wrong(call.arguments[name])}
        )
        evaluation = replay_reference(env, task.model_copy(update={"solution": solution}))
        assert not evaluation.success and evaluation.reward < 0.5, (family, name)
        checked += 1
    assert checked >= 12


def test_missing_answer_fails_even_with_the_right_state(env):
    checked = 0
    for family, task in one_task_per_family(env).items():
        if not any(task.checker["answers"]):
            continue
        env.reset(task)
        for calls in task.solution:
            env.step(list(calls))
            env.step("All done.")
        evaluation = env.evaluate()
        assert evaluation.details["state_match"], family
        assert not evaluation.success and 0.05 < evaluation.reward < 0.5, family
        checked += 1
    assert checked >= 6


def test_answer_matching_is_case_insensitive_and_numeric():
    assert answer_found("maple-4821", "The code is MAPLE-4821.")
    assert answer_found("1520.00", "It holds 1520 dollars") and answer_found("1520.50", "$1,520.5 left")
    assert not answer_found("20.00", "It holds 120.00") and not answer_found("shipped", None)
    assert money(37.5) == "37.50"


class RandomCallPolicy:
    """A seeded random agent: random offered tools, random or perturbed arguments, then a random reply."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def value(self, json_type: str, words: list[str]):
        rng = self.rng
        if rng.random() < 0.1:  # wrong JSON type
            return rng.choice([None, [1], {"a": 1}, True])
        return {
            "string": lambda: rng.choice(words + ["x", ""]),
            "integer": lambda: rng.randint(-1, 4),
            "number": lambda: round(rng.uniform(-5, 500), 2),
            "boolean": lambda: rng.random() < 0.5,
        }[json_type]()

    def call(self, tools: list[dict], words: list[str]) -> dict:
        function = self.rng.choice(tools)["function"]
        properties = function["parameters"]["properties"]
        arguments = {
            name: self.value(p["type"], words) for name, p in properties.items() if self.rng.random() < 0.9
        }
        if self.rng.random() < 0.1:
            arguments["extra"] = "junk"
        return {"name": function["name"], "arguments": arguments}

    def play(self, env, task) -> None:
        observation = env.reset(task)
        user, done = observation.messages[0]["content"], False
        while not done:
            words = re.findall(r"[\w./@:-]+", user)
            for _ in range(self.rng.randint(0, 3)):
                env.step([self.call(observation.tools, words) for _ in range(self.rng.randint(1, 2))])
            result = env.step("I think " + " ".join(self.rng.sample(words, min(3, len(words)))))
            done = result.done
            user = result.messages[0]["content"] if result.messages else user


def test_random_call_policy_almost_never_succeeds(env):
    policy = RandomCallPolicy(seed=0)
    rewards = []
    for task in env.tasks("test"):
        policy.play(env, task)
        evaluation = env.evaluate()
        assert evaluation.success == (evaluation.reward >= 0.5)
        rewards.append(evaluation.success)
    assert sum(rewards) / len(rewards) < 0.05
