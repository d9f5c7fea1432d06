"""The built-in tool world: splits, reference solvability, checker strictness, hostile input, protocol."""

from __future__ import annotations

import copy
import json
import random
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.replay import replay_reference
from coevolve.envs.toolworld.checker import answer_found, money
from coevolve.envs.toolworld.tasks import HELDOUT_TEMPLATES, TRAIN_TEMPLATES
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.llm.toolcalls import parse_tool_calls, render_tool_call

SMALL = {"n_train": 60, "n_test": 30, "n_heldout": 24}


@pytest.fixture(scope="module")
def env():
    return envs.make("toolworld", seed=0)


def one_task_per_family(env) -> dict[str, Task]:
    tasks = env.tasks("train") + env.tasks("heldout-templates")
    return {task.family: task for task in reversed(tasks)}


def tool_text(name: str, **arguments) -> str:
    return render_tool_call(ToolCall(name=name, arguments=arguments))


def bank_task(env) -> Task:
    return next(t for t in env.tasks("train") if t.family == "bank_balance")


# ---------------------------------------------------------------- splits and catalog


def test_splits_sizes_determinism_and_disjointness(env):
    assert env.splits() == ["train", "test", "heldout-templates"]
    assert [len(env.tasks(s)) for s in env.splits()] == [200, 48, 48]
    again = envs.make("toolworld", seed=0)
    for split in env.splits():
        assert [t.id for t in again.tasks(split)] == [t.id for t in env.tasks(split)]
    train_ids = {t.id for t in env.tasks("train")}
    assert len(train_ids) == 200
    assert train_ids.isdisjoint(t.id for t in env.tasks("test"))
    assert [t.id for t in envs.make("toolworld", seed=1).tasks("train")][:5] != [
        t.id for t in env.tasks("train")
    ][:5]


def test_families_apps_and_task_fields(env):
    train_families = {t.family for s in ("train", "test") for t in env.tasks(s)}
    heldout_families = {t.family for t in env.tasks("heldout-templates")}
    assert train_families == {t.name for t in TRAIN_TEMPLATES}
    assert heldout_families == {t.name for t in HELDOUT_TEMPLATES}
    assert train_families.isdisjoint(heldout_families) and len(heldout_families) >= 3
    assert len(train_families | heldout_families) >= 12
    all_tasks = [t for s in env.splits() for t in env.tasks(s)]
    assert len({app for t in all_tasks for app in t.initial_state}) >= 4
    assert Counter(len(t.turns) for t in all_tasks)[2] > 0
    assert max(sum(len(c) for c in t.solution) for t in all_tasks) >= 4
    single_call = {t.family for t in env.tasks("train") if sum(len(c) for c in t.solution) == 1}
    assert len(single_call) >= 4
    for task in all_tasks:
        assert task.env == "toolworld" and task.source == "benchmark" and task.split in env.splits()
        assert task.id == Task.make_id("toolworld", task.initial_state, task.turns, task.checker)
        assert len(task.solution) == len(task.turns) == len(task.checker["answers"])


def test_tool_schemas_are_documented_and_typed():
    catalog = ToolCatalog()
    schemas = catalog.schemas(catalog.names())
    assert len(schemas) >= 25
    for schema in schemas:
        function = schema["function"]
        assert schema["type"] == "function" and function["description"]
        assert function["parameters"]["type"] == "object"
        for name, prop in function["parameters"]["properties"].items():
            assert prop["type"] in {"string", "integer", "number", "boolean"}, name
            assert prop["description"], name
        assert set(function["parameters"]["required"]) <= set(function["parameters"]["properties"])


def test_generation_is_fast_enough_to_stay_in_memory():
    import time

    start = time.perf_counter()
    env = envs.make("toolworld", seed=3)
    for split in env.splits():
        env.tasks(split)
    assert time.perf_counter() - start < 2.0  # about 0.15 s on a laptop; loose bound for busy CI


# ---------------------------------------------------------------- reference solutions and solvability


@pytest.mark.parametrize("split", ["train", "test", "heldout-templates"])
def test_reference_solutions_score_full_reward(env, split):
    for task in env.tasks(split):
        evaluation = replay_reference(env, task)
        assert evaluation.success and evaluation.reward == 1.0, (task.family, evaluation.details)


def _literals(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _literals(item)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield value


def test_every_solution_literal_was_shown_to_the_agent(env):
    """Each argument value is quoted in a user turn or appears in an earlier tool result."""
    for task in env.tasks("train")[:60] + env.tasks("heldout-templates"):
        env.reset(task)
        seen = []
        for turn, calls in enumerate(task.solution):
            seen.append(task.turns[turn])
            for call in calls:
                for literal in _literals(call.arguments):
                    text = "\n".join(seen)
                    assert (str(literal) in text) or answer_found(str(literal), text), (task.family, literal)
                seen += [m["content"] for m in env.step([call]).messages]
            env.step("ok")


# ---------------------------------------------------------------- checker strictness


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


# ---------------------------------------------------------------- episode protocol


def test_single_turn_episode_messages_and_info(env):
    task = bank_task(env)
    account = task.solution[0][0].arguments["account_id"]
    observation = env.reset(task)
    assert observation.messages == [{"role": "user", "content": task.turns[0]}]
    assert {s["function"]["name"] for s in observation.tools} == set(ToolCatalog().names({"bank"}))
    step = env.step(
        "Let me check. " + tool_text("get_balance", account_id=account) + "<tool_call>oops</tool_call>"
    )
    assert not step.done and not step.turn_ended and step.info["turn"] == 0
    assert [m["role"] for m in step.messages] == ["tool", "tool"]
    assert json.loads(step.messages[0]["content"])["account_id"] == account
    assert step.messages[1]["content"].startswith("could not parse tool call:")
    assert step.info["calls"][0]["ok"] and step.info["calls"][0]["name"] == "get_balance"
    assert len(step.info["parse_errors"]) == 1
    final = env.step(f"The balance is {task.checker['answers'][0][0]}.")
    assert final.done and final.turn_ended and final.messages == []
    assert env.evaluate().success
    after = env.step("anything")
    assert after.done and after.messages == []


def test_multi_turn_episode_hands_over_the_next_user_turn(env):
    task = next(t for t in env.tasks("train") if len(t.turns) == 2)
    env.reset(task)
    env.step(list(task.solution[0]))
    step = env.step("Answer: " + " ".join(task.checker["answers"][0]))
    assert step.turn_ended and not step.done and step.messages == [{"role": "user", "content": task.turns[1]}]
    env.step(list(task.solution[1]))
    assert env.step("Answer: " + " ".join(task.checker["answers"][1])).done
    assert env.evaluate().success


def test_step_cap_ends_the_turn_without_an_answer():
    env = envs.make("toolworld", max_steps_per_turn=2, **SMALL)
    task = bank_task(env)
    env.reset(task)
    answer = task.checker["answers"][0][0]
    call = tool_text("get_balance", account_id=task.solution[0][0].arguments["account_id"])
    assert not env.step(call).turn_ended and not env.step(call).turn_ended
    capped = env.step(call + " " + answer)
    assert capped.turn_ended and capped.done and capped.info["step_limit"] and capped.info["calls"] == []
    evaluation = env.evaluate()
    # state check passed (1 of 2 checks), a call ran, and it was the solution's only tool
    assert not evaluation.success and evaluation.reward == pytest.approx(0.35 * 1 / 2 + 0.05 + 0.05 + 0.04)


def test_partial_credit_separates_the_right_tool_from_a_wrong_one():
    env = envs.make("toolworld", **SMALL)
    task = bank_task(env)
    account = task.solution[0][0].arguments["account_id"]
    rewards = {}
    for name, call in {"right": tool_text("get_balance", account_id=account),
                       "right-tool-bad-args": tool_text("get_balance", account_id="NOPE-0"),
                       "other": tool_text("list_accounts"), "hallucinated": tool_text("get_car", kind="fast"),
                       "malformed": '<tool_call>{"name": "get_balance" "x"}</tool_call>',
                       "none": "I cannot help."}.items():  # fmt: skip
        env.reset(task)
        env.step(call)
        env.step("Done.")
        rewards[name] = env.evaluate().reward
    assert rewards["right"] > rewards["other"] > rewards["none"]
    assert rewards["right"] > rewards["right-tool-bad-args"] > rewards["hallucinated"] > rewards["none"]
    assert rewards["malformed"] == rewards["none"] and rewards["right"] < 0.5


def test_reset_loads_a_copy_and_instances_share_nothing(env):
    task = next(t for t in env.tasks("train") if t.family == "transfer_funds")
    original = copy.deepcopy(task.initial_state)
    other = envs.make("toolworld", **SMALL)
    other.reset(task)
    replay_reference(env, task)
    assert task.initial_state == original
    assert other.state_digest() != env.state_digest()
    assert not other.evaluate().success


def test_snapshot_restore_and_digest(env):
    task = next(t for t in env.tasks("train") if t.family == "balance_then_transfer")
    env.reset(task)
    start = env.state_digest()
    env.step(list(task.solution[0]))
    env.step("Answer: " + task.checker["answers"][0][0])
    snapshot = json.loads(json.dumps(env.snapshot()))
    env.step(list(task.solution[1]))
    assert env.state_digest() != start
    fresh = envs.make("toolworld", **SMALL)
    fresh.restore(snapshot)
    assert fresh.state_digest() == start
    fresh.step(list(task.solution[1]))
    assert fresh.step("Answer: " + task.checker["answers"][1][0]).done
    assert fresh.evaluate().success


def test_all_tools_mode_offers_everything_and_stray_writes_fail(env):
    wide = envs.make("toolworld", tools="all", **SMALL)
    task = bank_task(wide)
    observation = wide.reset(task)
    assert len(observation.tools) == len(ToolCatalog().names())
    wide.step(
        list(task.solution[0]) + [{"name": "write_file", "arguments": {"path": "/a/b.txt", "content": "hi"}}]
    )
    wide.step("Answer: " + task.checker["answers"][0][0])
    evaluation = wide.evaluate()
    assert not evaluation.success and evaluation.details["mismatched_apps"] == ["files"]
    env.reset(task)
    step = env.step([{"name": "write_file", "arguments": {"path": "/a/b.txt", "content": "hi"}}])
    assert step.messages[0]["content"].startswith("Error: unknown tool")


def test_argument_validation_errors(env):
    env.reset(bank_task(env))
    cases = [
        ({}, "missing argument"),
        ({"account_id": 5}, "must be a string"),
        ({"account_id": "NOPE-0"}, "unknown account"),
    ]
    for arguments, expected in cases:
        content = env.step([{"name": "get_balance", "arguments": arguments}]).messages[0]["content"]
        assert content.startswith("Error:") and expected in content, content
    content = env.step(
        [{"name": "transfer", "arguments": {"from_account": "a", "to_account": "b", "amount": True}}]
    ).messages[0]["content"]
    assert "must be a number" in content


def test_unknown_arguments_are_ignored_with_a_note_unless_strict():
    lenient = envs.make("toolworld", n_train=10, n_test=2, n_heldout=2)
    task = bank_task(lenient)
    account = task.solution[0][0].arguments["account_id"]
    lenient.reset(task)
    content = lenient.step([{"name": "get_balance", "arguments": {"account_id": account, "pin": 1}}]).messages[0]["content"]
    assert not content.startswith("Error:") and 'Note: ignored unknown argument(s) "pin"' in content
    strict = envs.make("toolworld", n_train=10, n_test=2, n_heldout=2, strict_arguments=True)
    strict.reset(task)
    content = strict.step([{"name": "get_balance", "arguments": {"account_id": account, "pin": 1}}]).messages[0]["content"]
    assert content.startswith("Error:") and "unknown argument" in content


def test_demonstrations_use_real_tools_in_the_call_format(env):
    messages = env.demonstrations()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"] * 2
    names = set(ToolCatalog().names())
    for reply in (messages[1], messages[5]):
        parsed = parse_tool_calls(reply["content"])
        assert len(parsed.calls) == 1 and parsed.calls[0].name in names
    assert not messages[2]["content"].startswith("Error") and not messages[6]["content"].startswith("Error")
    assert not parse_tool_calls(messages[3]["content"]).has_tool_syntax


def test_bad_options_and_splits_are_rejected():
    with pytest.raises(ValueError):
        envs.make("toolworld", tools="some")
    with pytest.raises(ValueError):
        envs.make("toolworld", **SMALL).tasks("validation")


# ---------------------------------------------------------------- hostile actions


def _deep(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


HOSTILE_ACTIONS = [
    tool_text("rm_rf", path="/"),
    tool_text("__class__"),
    tool_text("__init__"),
    tool_text("__dict__"),
    tool_text("_move"),
    tool_text("state"),
    tool_text("empty_state"),
    tool_text("TOOLS"),
    [{"name": "__class__", "arguments": {}}, {"name": "__getattribute__", "arguments": {"name": "state"}}],
    [{"name": "get_balance", "arguments": {"account_id": ["SAV-2"]}}],
    [{"name": "get_balance", "arguments": {"account_id": "x" * 1_000_000}}],
    [{"name": "get_balance", "arguments": {"account_id": _deep(5000)}}],
    [{"name": "transfer", "arguments": {"from_account": "a", "to_account": "b", "amount": 10**400}}],
    '<tool_call>{"name": "transfer", "arguments": {"from_account": "a", "to_account": "b", '
    '"amount": NaN}}</tool_call>',
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    "<tool_call>" + '{"a":' * 5000 + "1" + "}" * 5000 + "</tool_call>",
    "<tool_call>not json at all</tool_call>",
    "<tool_call>",
    '<tool_call>{"name": 5}</tool_call>',
    '<tool_call>{"name": "get_balance", "arguments": "{\\"account_id\\": \\"\\ud800\\"}"}</tool_call>',
    tool_text("write_file", path="/a/\ud800.txt", content="\udcff bad"),
    "x" * 50_000,
    None,
    42,
    {"name": "get_balance"},
    [5, None, {"name": None}, {"function": "x"}],
    [{"function": {"name": "get_balance", "arguments": "{not json"}}],
]


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
def test_hostile_actions_become_error_messages(env, action):
    env.reset(bank_task(env))
    step = env.step(action)
    assert not step.turn_ended
    contents = [m["content"] for m in step.messages]
    assert contents and all(re.match(r"^(Error: |could not parse tool call: )", c) for c in contents)
    env.state_digest()
    assert not env.evaluate().success


def test_surrogates_in_stored_text_do_not_break_digests_or_snapshots(env):
    task = next(t for t in env.tasks("train") if t.family == "write_note")
    env.reset(task)
    step = env.step(tool_text("write_file", path="/a/\ud800.txt", content="\udcff bad"))
    assert step.info["calls"][0]["ok"]
    env.step("done \ud800")
    assert not env.evaluate().success
    json.dumps(env.snapshot())
    assert len(env.state_digest()) == 16


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(ToolCatalog().names()) | st.text(max_size=12),
    arguments=st.dictionaries(st.text(max_size=15), json_values, max_size=4),
    text=st.text(max_size=40),
)
def test_step_never_raises_on_arbitrary_calls(env, name, arguments, text):
    env.reset(bank_task(env))
    step = env.step([{"name": name, "arguments": arguments}])
    assert len(step.messages) == 1
    env.step(render_tool_call(ToolCall(name="get_balance", arguments=arguments)) + text)
    env.step(text)
    env.evaluate()
    env.state_digest()


class _Canary:
    """Flips when anything reaches it: it lives outside every episode's tools."""

    touched = False

    def __getattr__(self, name):
        _Canary.touched = True
        raise AttributeError(name)


@pytest.mark.slow
@settings(max_examples=3400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from([*ToolCatalog().names(), "__class__", "__init__", "__dict__", "_catalog", "canary",
                          "__import__", "eval", "exec", "os.system", "get_balance.__globals__"]) | st.text(max_size=12),
    arguments=st.dictionaries(st.text(max_size=15), json_values, max_size=4),
    text=st.text(max_size=60),
)
def test_hostile_calls_at_scale_stay_inside_the_episode(env, name, arguments, text):
    """3 hostile steps per example x 3,400 examples: over 10,000 cases per run, none escapes."""
    canary = _Canary()
    env.reset(bank_task(env))
    env.canary = canary  # reachable only by attribute access on the environment itself
    for action in ([{"name": name, "arguments": arguments}],
                   render_tool_call(ToolCall(name=name if name.isidentifier() else "x", arguments=arguments)) + text,
                   f"<tool_call>{text}</tool_call>"):
        step = env.step(action)
        assert all(isinstance(m["content"], str) for m in step.messages)
    env.evaluate()
    assert not _Canary.touched
