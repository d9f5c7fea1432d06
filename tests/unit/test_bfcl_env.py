"""BfclEnv: tasks and splits, tool schemas, the episode protocol, scoring options, snapshots, replay."""

from __future__ import annotations

import inspect
import json
from collections import Counter

import pytest

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.base import Task
from coevolve.envs.bfcl import data
from coevolve.envs.bfcl.backends import BFCL_CLASSES, backend_class, public_methods
from coevolve.envs.bfcl.official import official_check
from coevolve.envs.bfcl.state import public_state
from coevolve.envs.replay import replay_reference
from coevolve.llm.toolcalls import render_tool_call

JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object"}


@pytest.fixture(scope="module")
def env():
    return envs.make("bfcl")


def by_id(env, bfcl_id: str) -> Task:
    return next(t for t in env.tasks("all") if t.lineage["bfcl_id"] == bfcl_id)


def play_truth(env, task: Task, turns: range | None = None) -> None:
    for turn in turns if turns is not None else range(len(task.turns)):
        if task.solution[turn]:
            env.step(list(task.solution[turn]))
        env.step("Done.")


# ---------------------------------------------------------------- tasks and splits


def test_registry_and_task_fields(env):
    assert "bfcl" in envs.available() and env.name == "bfcl"
    tasks = env.tasks("all")
    assert len(tasks) == 200 and len({t.id for t in tasks}) == 200
    task = tasks[0]
    assert task.lineage == {"bfcl_id": "multi_turn_base_0", "bfcl_version": data.bfcl_version()}
    assert task.id == Task.make_id("bfcl", task.initial_state, task.turns, task.checker)
    assert task.source == "benchmark" and task.env == "bfcl" and task.split == "all"
    assert task.family == "GorillaFileSystem+TwitterAPI"
    assert task.checker["bfcl_id"] == "multi_turn_base_0" and len(task.checker["ground_truth"]) == len(
        task.turns
    )
    # the ground truth's positional `sort('final_report.pdf')` becomes a named argument
    assert task.solution[2] == [ToolCall(name="sort", arguments={"file_name": "final_report.pdf"})]
    assert Counter(len(t.turns) for t in tasks).keys() <= set(range(1, 8))
    assert sum(len(turn) == 0 for t in tasks for turn in t.solution) == 3


def test_splits_sizes_disjointness_and_stratification(env):
    assert env.splits() == ["all", "ae-train", "ae-test", "train", "test"]
    sizes = {s: len(env.tasks(s)) for s in env.splits()}
    assert sizes == {"all": 200, "ae-train": 100, "ae-test": 100, "train": 100, "test": 100}
    ids = {s: {t.lineage["bfcl_id"] for t in env.tasks(s)} for s in env.splits()}
    assert ids["ae-train"] == {f"multi_turn_base_{i}" for i in range(100)}
    assert ids["train"].isdisjoint(ids["test"]) and ids["train"] | ids["test"] == ids["all"]
    assert all(t.split == "train" for t in env.tasks("train"))
    # ae-*: domain-disjoint blocks (file system + vehicle vs trading + travel)
    domains = {"GorillaFileSystem", "VehicleControlAPI", "TradingBot", "TravelAPI"}

    def primary(split):
        return {c for t in env.tasks(split) for c in t.initial_state["involved_classes"] if c in domains}

    assert primary("ae-train") == {"GorillaFileSystem", "VehicleControlAPI"}
    assert primary("ae-test") == {"TradingBot", "TravelAPI"}
    # train/test: every involved-classes stratum split in half
    families = Counter(t.family for t in env.tasks("all"))
    train = Counter(t.family for t in env.tasks("train"))
    assert all(abs(2 * train[f] - n) <= 1 for f, n in families.items())
    again, other = envs.make("bfcl", seed=0), envs.make("bfcl", seed=1)
    assert [t.id for t in again.tasks("train")] == [t.id for t in env.tasks("train")]
    assert {t.id for t in other.tasks("train")} != {t.id for t in env.tasks("train")}


def test_bad_options_are_rejected(env):
    with pytest.raises(ValueError, match="category"):
        envs.make("bfcl", category="simple")
    with pytest.raises(ValueError, match="split"):
        env.tasks("dev")
    with pytest.raises(RuntimeError, match="reset"):
        envs.make("bfcl").step("[ls()]")
    assert envs.make("bfcl", category="multi_turn_miss_param").category == "multi_turn_miss_param"


# ---------------------------------------------------------------- tools


def _types(schema):
    yield schema["type"]
    if "items" in schema:
        yield from _types(schema["items"])
    for value in schema.get("properties", {}).values():
        yield from _types(value)


def test_tool_schemas_use_json_schema_types_and_match_the_backends():
    env = envs.make("bfcl")
    total = 0
    for class_name in BFCL_CLASSES:
        schemas = env._schemas([class_name])
        methods = public_methods(backend_class(class_name))
        assert {s["function"]["name"] for s in schemas} == set(methods)
        for schema in schemas:
            parameters = schema["function"]["parameters"]
            assert schema["type"] == "function" and parameters["type"] == "object"
            assert set(_types(parameters)) <= JSON_TYPES
            documented = list(parameters["properties"])
            signature = list(methods[schema["function"]["name"]].parameters)
            if schema["function"]["name"] != "purchase_insurance":  # the one doc listing another order
                assert signature[: len(documented)] == documented
        total += len(schemas)
    assert total == 128


def test_offered_tools_are_the_involved_classes(env):
    task = by_id(env, "multi_turn_base_0")
    obs = env.reset(task)
    names = {t["function"]["name"] for t in obs.tools}
    assert {"cd", "mv", "post_tweet"} <= names and "get_stock_info" not in names
    assert obs.messages == [{"role": "user", "content": task.turns[0]}]


# ---------------------------------------------------------------- episodes


def test_replay_of_every_base_ground_truth_succeeds(env):
    results = [replay_reference(envs.make("bfcl"), task) for task in env.tasks("all")]
    assert sum(r.success for r in results) == 200
    assert all(r.reward == 1.0 and r.details["bfcl_version"] == data.bfcl_version() for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("category", ["miss_func", "miss_param", "long_context"])
def test_replay_succeeds_in_every_category(category):
    tasks = envs.make("bfcl", category=category).tasks("all")
    assert all(replay_reference(envs.make("bfcl", category=category), t).success for t in tasks)


def test_step_formats_and_turn_flow(env):
    task = by_id(env, "multi_turn_base_0")
    env.reset(task)
    result = env.step(
        "[cd(folder='document'), mkdir('temp'), mv(source='final_report.pdf', destination='temp')]"
    )
    assert not result.done and not result.turn_ended
    assert [m["role"] for m in result.messages] == ["tool"] * 3
    assert json.loads(result.messages[0]["content"]) == {"current_working_directory": "document"}
    assert [c["name"] for c in result.info["calls"]] == ["cd", "mkdir", "mv"] and all(
        c["ok"] for c in result.info["calls"]
    )
    result = env.step("Moved it.")
    assert (
        result.turn_ended
        and not result.done
        and result.messages == [{"role": "user", "content": task.turns[1]}]
    )
    hermes = render_tool_call(ToolCall(name="cd", arguments={"folder": "temp"}))
    assert env.step(hermes).info["calls"][0]["result"] == '{"current_working_directory": "temp"}'
    listed = env.step(
        [
            {
                "function": {
                    "name": "grep",
                    "arguments": '{"file_name": "final_report.pdf", "pattern": "budget analysis"}',
                }
            }
        ]
    )
    assert "budget analysis" in listed.messages[0]["content"]
    env.step("Found it.")
    env.step([ToolCall(name="sort", arguments={"file_name": "final_report.pdf"})])
    env.step("Sorted.")
    play_truth(env, task, range(3, 4))
    assert env.evaluate().success
    over = env.step("[ls()]")
    assert over.done and over.info["episode_over"] and over.messages == []


def test_errors_are_results_in_the_harness_format(env):
    env.reset(by_id(env, "multi_turn_base_0"))
    result = env.step("[cd(folder='nowhere'), sort(), undefined_tool(x=1), mkdir(dir_name=5)]")
    contents = [m["content"] for m in result.messages]
    assert json.loads(contents[0]) == {"error": "cd: 'nowhere': No such file or directory"}
    assert contents[1].startswith("Error during execution: sort() missing required argument 'file_name'")
    assert contents[2] == "Error during execution: unknown tool 'undefined_tool'"
    assert contents[3].startswith(
        "Error during execution: argument 'dir_name' of mkdir must be of type string"
    )
    assert [c["ok"] for c in result.info["calls"]] == [False] * 4
    loose = envs.make("bfcl", check_types=False)  # the harness's pass-through: the backend decides
    loose.reset(by_id(env, "multi_turn_base_0"))
    assert "must be of type" not in loose.step("[mkdir(dir_name=5)]").messages[0]["content"]


def test_a_turns_21st_step_force_quits_and_fails_unless_it_is_the_last(env):
    task = by_id(env, "multi_turn_base_0")
    env.reset(task)
    for _ in range(20):
        assert not env.step("[pwd()]").done
    result = env.step("[pwd()]")
    assert result.done and result.turn_ended and result.info["step_limit"]
    evaluation = env.evaluate()
    assert (
        not evaluation.success
        and evaluation.details["failure"]["error_type"] == "multi_turn:force_terminated"
    )
    # on the last turn the harness keeps the turn, so the task is scored normally
    env.reset(task)
    play_truth(env, task, range(3))
    env.step(list(task.solution[3]))
    steps = 1
    while not env.step("[pwd()]").done:
        steps += 1
    assert steps == 20 and env.evaluate().success
    decoded = [[turn] for turn in task.checker["ground_truth"][:3]] + [
        [task.checker["ground_truth"][3]] + [["pwd()"]] * 20
    ]
    entry = data.load_entries("base")[0]
    assert official_check(entry, decoded, task.checker["ground_truth"])["valid"]


def test_miss_func_adds_the_held_out_docs_with_their_turn():
    env = envs.make("bfcl", category="miss_func")
    task = by_id(env, "multi_turn_miss_func_0")
    assert task.initial_state["missed_function"] == {"3": ["sort"]}
    obs = env.reset(task)
    assert "sort" not in {t["function"]["name"] for t in obs.tools}
    play_truth(env, task, range(2))
    assert task.solution[2] == []  # the turn that needs the missing function has no ground truth
    result = env.step("I have no tool to sort with.")
    assert [t["function"]["name"] for t in result.info["tools_added"]] == ["sort"]
    assert '"name": "sort"' in result.messages[-1]["content"]
    assert result.messages[-1]["content"].endswith(
        "I have updated some more functions you can choose from. What about now?"
    )
    play_truth(env, task, range(3, len(task.turns)))
    assert env.evaluate().success


def test_long_context_loads_the_long_scenario():
    base, long = envs.make("bfcl"), envs.make("bfcl", category="long_context")
    sizes = []
    for env in (base, long):
        env.reset(by_id(env, env.category + "_0"))
        sizes.append(len(json.dumps(public_state(env._episode.backends.instances))))
        assert env.step("[cd(folder='document'), cat(file_name='final_report.pdf')]").info["calls"][1]["ok"]
    assert sizes[1] > 2 * sizes[0]


def test_partial_credit_stays_below_success(env):
    task = by_id(env, "multi_turn_base_0")
    scored = {}
    for partial in (False, True):
        episode = envs.make("bfcl", partial_credit=partial)
        episode.reset(task)
        play_truth(episode, task, range(3))
        episode.step("I cannot do that.")
        scored[partial] = episode.evaluate()
    assert not scored[False].success and scored[False].reward == 0.0
    assert scored[False].details["turn_fraction"] == 0.75
    assert scored[True].reward == pytest.approx(0.3) and not scored[True].success


def test_unfinished_episode_fails(env):
    task = by_id(env, "multi_turn_base_0")
    env.reset(task)
    play_truth(env, task, range(2))
    evaluation = env.evaluate()
    assert not evaluation.success and evaluation.details["turns_passed"] == 2


# ---------------------------------------------------------------- state


def test_each_episode_gets_fresh_instances(env):
    task = by_id(env, "multi_turn_base_0")
    other = envs.make("bfcl")
    other.reset(task)
    before = other.state_digest()
    for _ in range(2):  # the official executor's cache would answer "already exists" the second time
        env.reset(task)
        result = env.step("[cd(folder='document'), mkdir(dir_name='temp')]")
        assert "error" not in result.messages[1]["content"]
    assert other.state_digest() == before


def test_digest_tracks_public_state_only(env):
    env.reset(by_id(env, "multi_turn_base_0"))
    start = env.state_digest()
    env.step("[ls(), pwd(), cd(folder='document')]")  # cd moves the private current directory only
    assert env.state_digest() == start
    env.step("[mkdir(dir_name='temp')]")
    assert env.state_digest() != start


def test_snapshot_restore_continues_the_episode(env):
    task = by_id(env, "multi_turn_base_0")
    env.reset(task)
    play_truth(env, task, range(1))
    env.step(list(task.solution[1]))
    snapshot = json.loads(json.dumps(env.snapshot()))
    twin = envs.make("bfcl")
    twin.restore(snapshot)
    assert twin.state_digest() == env.state_digest() and twin.snapshot() == snapshot
    for episode in (env, twin):
        episode.step("Done.")
        play_truth(episode, task, range(2, 4))
        assert episode.evaluate().success
    assert twin.state_digest() == env.state_digest()


def test_math_precision_does_not_leak_out_of_a_call(env):
    import decimal

    import mpmath

    env.reset(next(t for t in env.tasks("all") if "MathAPI" in t.initial_state["involved_classes"]))
    dps, prec = mpmath.mp.dps, decimal.getcontext().prec
    result = env.step(
        "[logarithm(value=10.0, base=2.0, precision=60), square_root(number=2.0, precision=80)]"
    )
    assert all(c["ok"] for c in result.info["calls"])
    # an mpf is not JSON: the harness's str() fallback, printed at the call's own precision
    assert result.messages[0]["content"].startswith(
        "{'result': mpf('3.32192809488736234787031942948939017586483139302"
    )
    assert (mpmath.mp.dps, decimal.getcontext().prec) == (dps, prec)


def test_positional_arguments_follow_the_backend_signature():
    signature = list(inspect.signature(backend_class("TravelAPI").purchase_insurance).parameters)[1:]
    env = envs.make("bfcl")
    task = next(t for t in env.tasks("all") if "TravelAPI" in t.initial_state["involved_classes"])
    env.reset(task)
    result = env.step("[purchase_insurance('tok', 'comprehensive', 'b1', 50.0, 'c1')]")
    assert result.info["calls"][0]["arguments"] == dict(
        zip(signature, ["tok", "comprehensive", "b1", 50.0, "c1"], strict=True)
    )
