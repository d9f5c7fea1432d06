"""The built-in tool world: splits, task fields, the tool catalog, and every reference solution solving
its task with only values the agent was shown. Checker strictness, the episode protocol and hostile input
are in test_toolworld_checker.py, test_toolworld_episodes.py and test_toolworld_hostile.py."""

from __future__ import annotations

from collections import Counter

import pytest

from coevolve import envs
from coevolve.envs.answers import answer_found
from coevolve.envs.base import Task
from coevolve.envs.replay import replay_reference
from coevolve.envs.toolworld.tasks import HELDOUT_TEMPLATES, TRAIN_TEMPLATES
from coevolve.envs.toolworld.tools import ToolCatalog


@pytest.fixture(scope="module")
def env():
    return envs.make("toolworld", seed=0)


# ---------------------------------------------------------------- splits and catalog


def test_splits_sizes_determinism_and_disjointness(env):
    assert env.splits() == ["train", "test", "validation", "heldout-templates"]
    assert [len(env.tasks(s)) for s in env.splits()] == [200, 48, 48, 48]
    again = envs.make("toolworld", seed=0)
    for split in env.splits():
        assert [t.id for t in again.tasks(split)] == [t.id for t in env.tasks(split)]
    train_ids = {t.id for t in env.tasks("train")}
    assert len(train_ids) == 200
    assert train_ids.isdisjoint(t.id for t in env.tasks("test"))
    validation = {t.id for t in env.tasks("validation")}  # its own stream, no task of train or test
    assert validation.isdisjoint(train_ids) and validation.isdisjoint(t.id for t in env.tasks("test"))
    assert {t.family for t in env.tasks("validation")} == {t.family for t in env.tasks("train")}
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
