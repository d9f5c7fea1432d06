"""The OpenEnv adapter in process: episodes of the project's loop on an OpenEnv environment of our own (the
stock room), rewarded by its rubric; synthesized candidates verified by the environment itself through the
verify stage's checks; bad options and task rows refused in one line naming them."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from coevolve import envs  # noqa: E402
from coevolve.agents.episodes import EpisodeLimits, run_episodes  # noqa: E402
from coevolve.core import ToolCall  # noqa: E402
from coevolve.envs.base import OptionError  # noqa: E402
from coevolve.envs.replay import replay_reference  # noqa: E402
from coevolve.llm.chat import ChatFormat  # noqa: E402
from coevolve.llm.engine import SamplingParams  # noqa: E402
from coevolve.processes import free_port  # noqa: E402
from coevolve.stages.verify.candidates import Rejected  # noqa: E402
from coevolve.stages.verify.checks import check_candidate  # noqa: E402
from coevolve.stages.verify.contamination import HeldOut  # noqa: E402
from coevolve.stages.verify.settings import VerifySettings  # noqa: E402
from tests.fakes.openenv_inventory import ENVIRONMENT, write_task_file  # noqa: E402
from tests.fakes.teacher import OracleEngine  # noqa: E402


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    return write_task_file(tmp_path_factory.mktemp("openenv") / "tasks.jsonl")


def make(task_file=None, **options):
    return envs.make("openenv", environment=ENVIRONMENT, tasks=str(task_file or ""), **options)


def test_a_task_file_gives_the_splits_and_their_reset_arguments(task_file):
    env = make(task_file)
    assert env.splits() == ["train", "test"]
    task = env.tasks("train")[0]
    assert task.env == "openenv" and task.initial_state == {"stock": {"bolt": 1, "nut": 3}, "goal": {"bolt": 2}}
    assert task.solution == [[ToolCall(name="add_stock", arguments={"item": "bolt", "quantity": 1})]]


def test_without_a_task_file_the_environment_s_own_task_source_is_used(task_file):
    own, listed = make(), make(task_file)
    assert {s: len(own.tasks(s)) for s in own.splits()} == {"train": 16, "test": 6}
    assert [t.id for t in own.tasks("test")] == [t.id for t in listed.tasks("test")]  # a solution is no content


def test_episodes_of_the_project_s_loop_are_rewarded_by_the_environment(task_file, tokenizer):
    tasks = make(task_file).tasks("train")[:3]
    jobs = [(task, 0) for task in tasks]

    def run(solve):
        engine = OracleEngine(tokenizer, tasks, solve=solve)
        return run_episodes(engine, ChatFormat(tokenizer), lambda: make(task_file), jobs,
                            SamplingParams(greedy=True), EpisodeLimits(max_replies=4))  # fmt: skip

    solved, idle = run("always"), run("never")
    assert [ep.evaluation.reward for ep in solved] == [1.0, 1.0, 1.0]
    assert all(ep.evaluation.success and ep.finish != "error" for ep in solved)
    assert [ep.evaluation.reward for ep in idle] == [0.0, 0.0, 0.0]
    first = solved[0]
    call = first.steps[0]
    assert (call["kind"], call["tool"], call["ok"], call["observation"]) == ("call", "add_stock", True, '{"bolt": 2}')
    assert json.loads(call["arguments"]) == {"item": "bolt", "quantity": 1}
    assert sum(first.loss_mask) > 0 and len(first.input_ids) == len(first.loss_mask)  # token-in/token-out


def test_tool_errors_and_unknown_tools_are_tool_messages(task_file):
    env = make(task_file)
    task = env.tasks("train")[0]
    obs = env.reset(task)
    assert [t["function"]["name"] for t in obs.tools] == ["list_stock", "add_stock", "remove_stock"]
    step = env.step([{"name": "remove_stock", "arguments": {"item": "bolt", "quantity": 99}},
                     {"name": "teleport", "arguments": {}}])  # fmt: skip
    assert [c["ok"] for c in step.info["calls"]] == [False, False]
    assert step.messages[0]["content"].startswith("Error:") and "only 1 units of 'bolt'" in step.messages[0]["content"]
    assert "teleport" in step.messages[1]["content"]
    assert env.evaluate().reward == 0.0
    assert replay_reference(env, task).reward == 1.0


def test_the_state_digest_tells_a_read_from_a_change(task_file):
    env = make(task_file)
    env.reset(env.tasks("train")[0])
    before = env.state_digest()
    env.step([{"name": "list_stock", "arguments": {}}])
    assert env.state_digest() == before
    env.step([{"name": "add_stock", "arguments": {"item": "nut", "quantity": 1}}])
    assert env.state_digest() != before


def candidate(calls, reset, query="Add 3 units of bolt so that the stock room holds 5 units of bolt."):
    return {"candidate_id": "c", "group_id": "g-c", "exploration_id": "x", "task_id": "t", "env": "openenv",
            "status": "ok", "query": query, "solution": json.dumps(calls), "answers": "[]",
            "initial_state": json.dumps(reset)}  # fmt: skip


RESET = {"stock": {"bolt": 2}, "goal": {"bolt": 5}}
ADD_3 = [{"name": "add_stock", "arguments": {"item": "bolt", "quantity": 3}}]


def verdict(calls, reset=RESET):
    return check_candidate(lambda: make(), candidate(calls, reset), HeldOut(), VerifySettings())


def test_a_candidate_whose_reference_calls_earn_the_reward_is_verified():
    checked = verdict(ADD_3)
    assert checked.executed and checked.task.checker["reference_reward"] == 1.0
    assert checked.task.checker["idle_reward"] == 0.0 and checked.task.source == "synthesized"


@pytest.mark.parametrize(("calls", "reset", "reason"), [
    ([], RESET, "reward 0.00, below success"),
    ([{"name": "add_stock", "arguments": {"item": "bolt", "quantity": 2}}], RESET, "reward 0.00, below success"),
    ([{"name": "remove_stock", "arguments": {"item": "bolt", "quantity": 3}}], RESET, "remove_stock failed"),
    ([{"name": "list_stock", "arguments": {}}], {"stock": {"bolt": 5}, "goal": {"bolt": 5}},
     "doing nothing already earns reward 1.00"),
])  # fmt: skip
def test_the_environment_refuses_what_its_verify_does_not_pass(calls, reset, reason):
    with pytest.raises(Rejected, match=reason):
        verdict(calls, reset)


@pytest.mark.parametrize(("options", "named"), [
    ({"environment": "no_such_package.env:Env"}, "env.options.environment: cannot import 'no_such_package.env'"),
    ({"environment": "coevolve.envs.openenv.example_inventory:NoSuchEnv"}, "has no attribute 'NoSuchEnv'"),
    ({"environment": "not-an-import-path"}, "not an import path"),
    ({}, "name exactly one of environment"),
    ({"url": "http://127.0.0.1:{port}", "tasks": "tasks.jsonl"}, "env.options.url: no OpenEnv server answers at"),
])  # fmt: skip
def test_bad_options_are_one_line_naming_the_option(options, named):
    options = {k: v.format(port=free_port()) for k, v in options.items()}
    with pytest.raises(OptionError) as refused:
        envs.make("openenv", **options)
    assert named in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(("line", "named"), [
    ('{"reset": {"stock": {}}}', "row 2: 'prompt' missing"),
    ('{"prompt": "Hi", "reset": [1, 2]}', "row 2: 'reset' is the reset's keyword arguments"),
    ('{"prompt": "Hi", "rest": {}}', "row 2: unknown field 'rest'"),
    ('{"prompt": "Hi"', "row 2: not JSON"),
])  # fmt: skip
def test_a_malformed_task_row_is_one_line_naming_the_file_and_row(tmp_path, line, named):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"prompt": "Fine.", "reset": {}}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        make(path).splits()
    assert f"{path} {named}" in str(refused.value) and "\n" not in str(refused.value)


def test_a_parquet_task_file_reads_like_jsonl(tmp_path, task_file):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in task_file.read_text().splitlines()]
    table = pa.table({"prompt": [r["prompt"] for r in rows], "reset": [json.dumps(r["reset"]) for r in rows],
                      "split": [r["split"] for r in rows]})  # fmt: skip
    pq.write_table(table, tmp_path / "tasks.parquet")
    from_parquet, from_jsonl = make(tmp_path / "tasks.parquet"), make(task_file)
    assert [t.id for t in from_parquet.tasks("test")] == [t.id for t in from_jsonl.tasks("test")]


def test_a_missing_reset_argument_and_a_malformed_tool_schema_are_one_line_each():
    from coevolve.envs.openenv.sessions import SessionError
    from coevolve.envs.openenv.tasks import task_of

    task = task_of({"prompt": "Add a bolt.", "reset": {"stock": {"bolt": 1}}}, "row")
    strict = envs.make("openenv", environment="tests.fakes.openenv_inventory:GoalRequiredEnvironment")
    with pytest.raises(SessionError) as refused:
        strict.reset(task)
    assert "reset rejected the task's arguments" in str(refused.value) and "'goal'" in str(refused.value)
    malformed = envs.make("openenv", environment="tests.fakes.openenv_inventory:BadSchemaEnvironment")
    with pytest.raises(ValueError) as refused:
        malformed.reset(task)
    assert str(refused.value).startswith("tool 'count': its input schema is not a JSON-schema object")


@pytest.mark.parametrize("factory", ["InventorySessions", "STOCK_ROOM_SESSIONS"])  # a class or an instance
def test_a_resource_session_factory_runs_episodes_and_verifies_through_its_verify(task_file, factory):
    env = envs.make("openenv", environment=f"tests.fakes.openenv_inventory:{factory}", tasks=str(task_file))
    task = env.tasks("train")[0]
    assert replay_reference(env, task).reward == 1.0 and env.state_digest() is None
    env.reset(task)
    step = env.step([{"name": "remove_stock", "arguments": {"item": "bolt", "quantity": 99}}])
    assert step.info["calls"][0]["ok"] is False and "only 1 units of 'bolt'" in step.messages[0]["content"]
    assert env.evaluate().reward == 0.0
    reset, add = RESET, [[ToolCall(**c) for c in ADD_3]]
    assert env.derive_checker(reset, ["Add 3 bolts."], add, [[]])["reference_reward"] == 1.0
    for solution in ([[]], [[ToolCall(name="add_stock", arguments={"item": "bolt", "quantity": 1})]]):
        with pytest.raises(ValueError, match="reference calls reward 0.00"):
            env.derive_checker(reset, ["Add 3 bolts."], solution, [[]])


def test_the_adapter_imports_no_openenv_until_an_episode_needs_it():
    import subprocess

    probe = "import sys, coevolve.envs.openenv.env; print(sorted({'openenv', 'fastmcp', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_without_verification_a_candidate_the_environment_cannot_reset_is_derived_not_refused():
    env = envs.make("openenv", environment="tests.fakes.openenv_inventory:GoalRequiredEnvironment")
    no_goal = {"stock": {"bolt": 2}}
    with pytest.raises(ValueError, match="reset rejected the task's arguments"):
        env.derive_checker(no_goal, ["Add 3 bolts."], [[ToolCall(**ADD_3[0])]], [[]])
    checker = env.derive_checker(no_goal, ["Add 3 bolts."], [[ToolCall(**ADD_3[0])]], [[]], strict=False)
    assert (checker["reference_reward"], checker["idle_reward"]) == (0.0, 0.0)


def test_an_environment_that_needs_the_missing_extra_names_it(tmp_path, monkeypatch):
    (tmp_path / "needs_extra.py").write_text("import openenv_that_is_not_installed\n", encoding="utf-8")
    (tmp_path / "needs_openenv.py").write_text("import openenv\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "openenv", None)  # as if the extra were not installed
    with pytest.raises(OptionError) as refused:
        envs.make("openenv", environment="needs_openenv:Env")
    assert str(refused.value).endswith("install the extra: pip install 'coevolve[openenv]'")
    with pytest.raises(OptionError) as refused:
        envs.make("openenv", environment="needs_extra:Env")
    assert "install the extra" not in str(refused.value)
