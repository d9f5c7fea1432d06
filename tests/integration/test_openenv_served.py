"""The OpenEnv adapter on a served environment: the stock room under OpenEnv's `create_app` and uvicorn on
127.0.0.1 (started and stopped here), reached past a proxy the environment names, gives the same episodes,
rewards, state digests and verification verdicts as the same environment in process."""

from __future__ import annotations

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from coevolve import envs  # noqa: E402
from coevolve.agents.episodes import EpisodeLimits, run_episodes  # noqa: E402
from coevolve.core import ToolCall  # noqa: E402
from coevolve.envs.base import OptionError  # noqa: E402
from coevolve.envs.openenv.sessions import SessionError  # noqa: E402
from coevolve.envs.replay import replay_reference  # noqa: E402
from coevolve.llm.chat import ChatFormat  # noqa: E402
from coevolve.llm.engine import SamplingParams  # noqa: E402
from tests.fakes.openenv_inventory import CRAMPED_APP, ENVIRONMENT, served_inventory, write_task_file  # noqa: E402
from tests.fakes.teacher import OracleEngine  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DEAD_PROXY = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(url, task file) of the stock room served for this module; the environment names a proxy that
    answers nothing, which loopback connections must not use."""
    task_file = write_task_file(tmp_path_factory.mktemp("openenv") / "tasks.jsonl")
    with pytest.MonkeyPatch.context() as patch, served_inventory() as url:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            patch.setenv(name, DEAD_PROXY)
        for name in ("NO_PROXY", "no_proxy"):
            patch.delenv(name, raising=False)
        yield url, task_file


def test_served_episodes_match_the_in_process_ones(served, tokenizer):
    url, task_file = served
    remote = envs.make("openenv", url=url, tasks=str(task_file))
    local = envs.make("openenv", environment=ENVIRONMENT, tasks=str(task_file))
    tasks = remote.tasks("train")[:3]
    assert [t.id for t in tasks] == [t.id for t in local.tasks("train")[:3]]
    for task in tasks:
        digests = []
        for env in (remote, local):
            assert replay_reference(env, task).reward == 1.0
            digests.append(env.state_digest())
            env.close()
        assert digests[0] == digests[1]

    def run(make, solve):
        engine = OracleEngine(tokenizer, tasks, solve=solve)
        episodes = run_episodes(engine, ChatFormat(tokenizer), make, [(t, 0) for t in tasks],
                                SamplingParams(greedy=True), EpisodeLimits(max_replies=4))  # fmt: skip
        return [(ep.finish, ep.evaluation.reward, ep.input_ids) for ep in episodes]

    def remote_env():
        return envs.make("openenv", url=url, tasks=str(task_file))

    def local_env():
        return envs.make("openenv", environment=ENVIRONMENT, tasks=str(task_file))

    for solve, reward in (("always", 1.0), ("never", 0.0)):
        served_rows, local_rows = run(remote_env, solve), run(local_env, solve)
        assert [r[1] for r in served_rows] == [reward] * 3
        assert served_rows == local_rows  # the same tokens, the same rewards


def test_without_a_task_file_the_server_s_own_tasks_are_read(served):
    url, task_file = served
    own, listed = envs.make("openenv", url=url), envs.make("openenv", url=url, tasks=str(task_file))
    assert {s: len(own.tasks(s)) for s in own.splits()} == {"train": 16, "test": 6}
    assert [t.id for t in own.tasks("test")] == [t.id for t in listed.tasks("test")]


def test_served_tool_errors_are_tool_messages(served):
    url, task_file = served
    env = envs.make("openenv", url=url, tasks=str(task_file))
    env.reset(env.tasks("train")[0])
    step = env.step([{"name": "remove_stock", "arguments": {"item": "bolt", "quantity": 99}}])
    assert step.info["calls"][0]["ok"] is False and "only 1 units of 'bolt'" in step.messages[0]["content"]
    env.close()


def test_the_served_environment_verifies_synthesized_candidates(served):
    url, task_file = served
    env = envs.make("openenv", url=url, tasks=str(task_file))
    reset = {"stock": {"bolt": 2}, "goal": {"bolt": 5}}
    add = [[ToolCall(name="add_stock", arguments={"item": "bolt", "quantity": 3})]]
    checker = env.derive_checker(reset, ["Add 3 bolts."], add, [[]])
    assert (checker["reference_reward"], checker["idle_reward"]) == (1.0, 0.0)
    wrong = [[ToolCall(name="add_stock", arguments={"item": "bolt", "quantity": 1})]]
    for solution in ([[]], wrong):
        with pytest.raises(ValueError, match="reference calls reward 0.00"):
            env.derive_checker(reset, ["Add 3 bolts."], solution, [[]])


def test_a_stopped_server_is_one_line_naming_the_url(tmp_path):
    task_file = write_task_file(tmp_path / "tasks.jsonl", splits=("test",))
    with served_inventory() as url:
        envs.make("openenv", url=url, tasks=str(task_file))
    with pytest.raises(OptionError, match=f"env.options.url: no OpenEnv server answers at {url}"):
        envs.make("openenv", url=url, tasks=str(task_file))


def test_a_server_without_tasks_or_room_for_another_session_is_one_line_each(tmp_path):
    task_file = write_task_file(tmp_path / "tasks.jsonl", splits=("test",))
    with served_inventory(CRAMPED_APP) as url:
        with pytest.raises(OptionError) as refused:
            envs.make("openenv", url=url).splits()
        assert str(refused.value).startswith(f"env.options.tasks: {url}/inventory/splits answered HTTP 501")
        first, second = (envs.make("openenv", url=url, tasks=str(task_file)) for _ in range(2))
        task = first.tasks("test")[0]
        first.reset(task)
        with pytest.raises(SessionError) as refused:
            second.reset(task)
        assert str(refused.value).startswith(url) and "\n" not in str(refused.value)
        first.close()
