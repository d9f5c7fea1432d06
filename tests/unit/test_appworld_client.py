"""AppWorldEnv against `FakeAppWorldServer`: tasks, episodes, scoring, errors, and the TGC / SGC metrics."""

from __future__ import annotations

import json
import time

import pytest

from coevolve import envs
from coevolve.core import ToolCall
from coevolve.envs.appworld import AppWorldEnv, AppWorldError, scenario_goal_completion, task_goal_completion
from coevolve.envs.appworld.actions import read_code
from coevolve.envs.appworld.env import PARTIAL_CREDIT_SCALE, evaluation_of
from coevolve.processes import free_port
from tests.fakes.appworld_server import FAKE_TASKS, SUPERVISOR, FakeAppWorldServer

IDS = list(FAKE_TASKS)


@pytest.fixture
def fake():
    server = FakeAppWorldServer().start()
    yield server
    server.stop()


@pytest.fixture
def env(fake):
    return AppWorldEnv(base_url=fake.url, split_tasks={"dev": IDS}, timeout=5)


def _call(code: str) -> str:
    return "<tool_call>" + json.dumps({"name": "execute", "arguments": {"code": code}}) + "</tool_call>"


def _task(env: AppWorldEnv, task_id: str):
    return next(t for t in env.tasks("dev") if t.initial_state["task_id"] == task_id)


def _executed(fake: FakeAppWorldServer) -> list[str]:
    return [body["code"] for method, path, body in fake.requests if path == "/execute"]


# -- tasks -----------------------------------------------------------------------------------------


def test_registry_builds_the_client_with_appworld_splits(fake):
    env = envs.make("appworld", base_url=fake.url, split_tasks={"mine": IDS[:1]})
    assert isinstance(env, AppWorldEnv) and isinstance(env, envs.Environment)
    assert env.splits() == ["train", "dev", "test_normal", "test_challenge", "mine"]
    with pytest.raises(ValueError, match="unknown AppWorld split"):
        env.tasks("test")


def test_tasks_come_from_the_server_with_scenario_families(env, fake):
    tasks = env.tasks("dev")
    assert [t.initial_state for t in tasks] == [{"task_id": i} for i in IDS]
    assert [t.family for t in tasks] == ["a1b2c3d", "a1b2c3d", "e4f5a6b"]
    first = tasks[0]
    assert first.env == "appworld" and first.split == "dev" and first.source == "benchmark"
    assert first.turns[0].startswith(FAKE_TASKS["a1b2c3d_1"].instruction)
    assert "Joyce Weaver" in first.turns[0] and SUPERVISOR["email"] in first.turns[0]
    assert len({t.id for t in tasks}) == 3
    assert [p for m, p, _ in fake.requests if m == "GET"] == [f"/tasks/{i}" for i in IDS]
    again = AppWorldEnv(base_url=fake.url, split_tasks={"dev": IDS}).tasks("dev")
    assert [t.id for t in again] == [t.id for t in tasks]  # content-hash ids are stable


def test_local_data_folder_gives_the_same_tasks_without_the_server(env, tmp_path):
    (tmp_path / "data" / "datasets").mkdir(parents=True)
    (tmp_path / "data" / "datasets" / "dev.txt").write_text("\n".join(IDS) + "\n\n")
    for task_id, task in FAKE_TASKS.items():
        folder = tmp_path / "data" / "tasks" / task_id
        folder.mkdir(parents=True)
        specs = {"instruction": task.instruction, "supervisor": {**SUPERVISOR, "password": "pw"}}
        (folder / "specs.json").write_text(json.dumps(specs))
    offline = AppWorldEnv(base_url=f"http://127.0.0.1:{free_port()}", data_root=tmp_path)
    assert [t.id for t in offline.tasks("dev")] == [t.id for t in env.tasks("dev")]


def test_split_without_task_ids_says_where_they_come_from(tmp_path, monkeypatch):
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    env = AppWorldEnv(data_root=tmp_path)
    with pytest.raises(AppWorldError, match="appworld download data") as err:
        env.tasks("train")
    assert "split_tasks" in str(err.value) and str(tmp_path) in str(err.value)


def test_split_tasks_file_is_read_and_checked(fake, tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("# two dev tasks\na1b2c3d_1\ne4f5a6b_1  # a comment\na1b2c3d_1\n")
    env = AppWorldEnv(base_url=fake.url, split_tasks={"dev": str(ids)})
    assert [t.initial_state["task_id"] for t in env.tasks("dev")] == ["a1b2c3d_1", "e4f5a6b_1"]
    ids.write_text("a1b2c3d_1\nrm -rf /\n")
    with pytest.raises(ValueError, match="not an AppWorld task id"):
        AppWorldEnv(base_url=fake.url, split_tasks={"dev": str(ids)}).tasks("dev")
    with pytest.raises(AppWorldError, match="not found"):
        AppWorldEnv(split_tasks={"dev": str(tmp_path / "missing.txt")}).tasks("dev")


# -- episodes --------------------------------------------------------------------------------------


def test_episode_runs_code_on_the_server_until_complete_task(env, fake):
    task = _task(env, "a1b2c3d_1")
    obs = env.reset(task)
    assert obs.messages == [{"role": "user", "content": task.turns[0]}]
    assert [t["function"]["name"] for t in obs.tools] == ["execute"]
    step = env.step("Let me look.\n```python\nprint('hello')\n```")
    assert step.messages == [{"role": "tool", "content": "hello"}]
    assert not step.done and not step.turn_ended
    assert step.info["calls"] == [
        {"name": "execute", "arguments": {"code": "print('hello')"}, "ok": True, "result": "hello"}
    ]
    step = env.step(_call('apis.supervisor.complete_task(answer="Blue Train")'))
    assert step.done and step.turn_ended and step.info["completed"]
    evaluation = env.evaluate()
    assert evaluation.success and evaluation.reward == 1.0
    assert evaluation.details["num_tests"] == 3 and evaluation.details["passed"] == 3
    assert evaluation.details["appworld_task_id"] == "a1b2c3d_1" and evaluation.details["interactions"] == 2
    assert env.step("```python\nprint('hello')\n```").info["episode_over"]
    env.close()
    assert fake.world is None and fake.requests[-1][1:] == ("/close", {"task_id": "a1b2c3d_1"})
    assert _executed(fake) == ["print('hello')", 'apis.supervisor.complete_task(answer="Blue Train")']


def test_failed_tests_give_partial_credit_below_one_half(env):
    env.reset(_task(env, "a1b2c3d_1"))
    no_op = env.evaluate()
    assert not no_op.success and no_op.reward == pytest.approx(PARTIAL_CREDIT_SCALE / 3)
    env.step("```python\napis.supervisor.complete_task(answer='Red Train')\n```")
    wrong = env.evaluate()
    assert not wrong.success and wrong.reward == pytest.approx(PARTIAL_CREDIT_SCALE * 2 / 3)
    assert wrong.reward < 0.5
    assert wrong.details["failed_requirements"] == ["assert the answer matches"]
    strict = AppWorldEnv(base_url=env.client.base_url, split_tasks={"dev": IDS}, partial_credit=False)
    strict.reset(_task(env, "e4f5a6b_1"))
    assert strict.evaluate().reward == 0.0


def test_action_task_succeeds_from_a_list_of_calls(env):
    env.reset(_task(env, "e4f5a6b_1"))
    calls = [
        ToolCall(name="execute", arguments={"code": "apis.venmo.decline_payment_requests(sender='Ann')"}),
        {
            "function": {
                "name": "execute",
                "arguments": json.dumps({"code": "apis.supervisor.complete_task()"}),
            }
        },
    ]
    step = env.step(calls)  # two calls are joined into one program, which the fake does not know
    assert not step.info["calls"][0]["ok"] and "NameError" in step.info["calls"][0]["error"]
    env.step(
        [{"name": "execute", "arguments": {"code": "apis.venmo.decline_payment_requests(sender='Ann')"}}]
    )
    assert env.step([calls[1]]).done
    assert env.evaluate().success


def test_failed_execution_is_an_observation_not_a_crash(env):
    env.reset(_task(env, "a1b2c3d_2"))
    step = env.step("```python\nprint(1 / 0)\n```")
    assert not step.done and step.info["calls"][0]["ok"] is False
    assert "ZeroDivisionError" in step.messages[0]["content"]


def test_reply_without_code_runs_nothing_and_counts(env, fake):
    env.reset(_task(env, "a1b2c3d_2"))
    step = env.step("I should first find out which apps exist.")
    assert step.messages[0]["role"] == "user" and "execute" in step.messages[0]["content"]
    assert step.info["calls"] == [] and step.info["interaction"] == 1 and not step.done
    step = env.step(_call("x = 1").replace("execute", "python"))
    assert step.info["parse_errors"] == ["unknown tool 'python': the only tool is execute(code)"]
    assert step.messages[0]["content"].startswith("could not parse tool call")
    assert _executed(fake) == []


def test_code_is_sent_never_run_here(env, fake, tmp_path):
    marker = tmp_path / "ran.txt"
    code = f"open({str(marker)!r}, 'w').write('ran')"
    env.reset(_task(env, "a1b2c3d_1"))
    step = env.step(f"```python\n{code}\n```")
    assert not marker.exists() and _executed(fake) == [code] and not step.info["calls"][0]["ok"]


def test_interaction_cap_ends_the_episode(fake):
    env = AppWorldEnv(base_url=fake.url, split_tasks={"dev": IDS}, max_interactions=3)
    env.reset(_task(env, "a1b2c3d_1"))
    results = [env.step("```python\nprint('hello')\n```") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True]
    assert results[-1].turn_ended and results[-1].info["interaction_limit"]
    assert env.step("```python\nprint('hello')\n```").info["episode_over"]
    assert len(_executed(fake)) == 3
    assert env.evaluate().details["interactions"] == 3


def test_long_output_is_clipped_in_the_middle(fake):
    env = AppWorldEnv(base_url=fake.url, split_tasks={"dev": IDS}, max_output_chars=200)
    env.reset(_task(env, "a1b2c3d_1"))
    step = env.step("```python\nprint('x' * 5000)\n```")
    content = step.messages[0]["content"]
    assert len(content) < 300 and "[4800 characters cut]" in content
    assert step.info["calls"][0]["result"] == "x" * 5000  # the ledger keeps the full output


# -- errors ----------------------------------------------------------------------------------------


def test_server_down_names_the_url_and_the_start_command(env):
    task = env.tasks("dev")[0]
    port = free_port()
    down = AppWorldEnv(base_url=f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(AppWorldError) as err:
        down.reset(task)
    message = str(err.value)
    assert f"http://127.0.0.1:{port}/initialize" in message
    assert f"appworld serve environment --port {port}" in message and "appworld download data" in message


def test_server_error_status_becomes_app_world_error(env, fake):
    env.reset(_task(env, "a1b2c3d_1"))
    fake.fail["/execute"] = 500
    with pytest.raises(AppWorldError, match=r"/execute answered HTTP 500: scripted failure"):
        env.step("```python\nprint('hello')\n```")
    with pytest.raises(AppWorldError, match="HTTP 500: Internal Server Error.*appworld download data"):
        env.reset(env.tasks("dev")[0].model_copy(update={"initial_state": {"task_id": "fffffff_9"}}))


def test_slow_server_times_out_instead_of_hanging(fake):
    env = AppWorldEnv(base_url=fake.url, split_tasks={"dev": IDS}, timeout=0.3)
    env.reset(_task(env, "a1b2c3d_1"))
    fake.stall["/execute"] = 10
    started = time.monotonic()
    with pytest.raises(AppWorldError, match=r"did not answer within 0\.3 s"):
        env.step("```python\nprint('hello')\n```")
    assert time.monotonic() - started < 3


def test_two_episodes_on_one_server_clash_with_a_clear_error(env, fake):
    other = AppWorldEnv(base_url=fake.url, split_tasks={"dev": IDS})
    env.reset(_task(env, "a1b2c3d_1"))
    other.reset(_task(env, "a1b2c3d_2"))  # AppWorld: initialising a world closes the others
    with pytest.raises(AppWorldError, match="own server"):
        env.step("```python\nprint('hello')\n```")


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="base_url"):
        AppWorldEnv(base_url="localhost:8000")
    with pytest.raises(ValueError, match="timeout"):
        AppWorldEnv(timeout=0)
    with pytest.raises(ValueError, match="max_interactions"):
        AppWorldEnv(max_interactions=0)


# -- actions and scoring ---------------------------------------------------------------------------


def test_code_extraction_forms():
    assert read_code("```python\na = 1\n```\ntext\n```py\nprint(a)\n```").code == "a = 1\n\nprint(a)"
    assert read_code("```\nb = 2\n```").code == "b = 2"
    assert read_code("```python\nc = 3").code == "c = 3"  # cut by the token limit: runs to the end
    assert read_code("no code here").code == "" and not read_code("no code here").errors
    assert read_code(_call("d = 4")).code == "d = 4"
    assert read_code('<tool_call>{"name": "execute", "arguments": {}}</tool_call>').errors == [
        "execute needs a string argument `code`"
    ]
    assert read_code(42).errors and read_code("x" * 30_000).errors


def test_evaluation_report_shapes():
    report = {
        "success": False,
        "difficulty": 2,
        "num_tests": 4,
        "passes": [{"requirement": "a"}] * 3,
        "failures": [{"requirement": "b", "trace": "..."}],
    }
    evaluation = evaluation_of(report)
    assert evaluation.reward == pytest.approx(PARTIAL_CREDIT_SCALE * 0.75) and not evaluation.success
    assert evaluation.details["difficulty"] == 2 and evaluation.details["failed_requirements"] == ["b"]
    assert evaluation_of({**report, "success": True, "failures": [], "num_tests": 3}).reward == 1.0
    assert evaluation_of({"passes": [{"requirement": "a"}], "failures": []}).success  # no success key
    with pytest.raises(AppWorldError, match="unexpected AppWorld evaluation report"):
        evaluation_of("Num Passed Tests : 3")


def test_goal_completion_metrics():
    results = {"aaa_1": True, "aaa_2": True, "aaa_3": True, "bbb_1": True, "bbb_2": False, "bbb_3": True}
    assert task_goal_completion(results) == pytest.approx(5 / 6)
    assert scenario_goal_completion(results) == 0.5
    repeated = [("ccc_1", True), ("ccc_1", False), ("ddd_1", True)]  # K samples: every one must pass
    assert scenario_goal_completion(repeated) == 0.5 and task_goal_completion(repeated) == 0.5
    assert scenario_goal_completion({}) == 0.0


def test_an_answer_over_the_byte_cap_is_refused_before_it_is_read_whole(fake):
    from coevolve.envs.appworld.client import AppWorldClient

    task_path = f"/tasks/{IDS[0]}"
    small = AppWorldClient(fake.url, timeout=5, max_response_bytes=64)
    with pytest.raises(AppWorldError, match=rf"{task_path} answered more than 64 bytes; refused"):
        small.get(task_path)
    assert AppWorldClient(fake.url, timeout=5).get(task_path)  # the same answer under the default cap
