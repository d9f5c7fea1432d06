"""Environment episodes in Ray actors (`runtime.ray_address`), on a local Ray head started on loopback.

What must hold: an episode played in an actor gives exactly the episode played in process (same
evaluation, same trajectories through the real stages), actors are reused from one episode to the next,
every concurrent episode has its own actor, and a dead actor becomes an episode error, not a crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray  # a dev dependency: missing is an error, not a skip

from coevolve.envs import FreshTasks, TaskSynthesis
from tests.conftest import CONFIGS, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """`ray start --head` on 127.0.0.1 (no dashboard), stopped after the module's tests."""
    cli = Path(sys.executable).with_name("ray")
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tmp_path_factory.mktemp("ray")
    start = [
        str(cli),
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--num-cpus=2",
        "--include-dashboard=false",
        "--object-store-memory=100000000",
        f"--temp-dir={temp}",
    ]
    subprocess.run(start, check=True, env=env, capture_output=True, timeout=120)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        subprocess.run([str(cli), "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


def _config(overrides: list[str]):
    from coevolve.config import load_config

    return load_config(CONFIGS / "test-tiny.yaml", overrides)


def test_an_episode_in_an_actor_equals_the_episode_in_process(ray_head):
    from coevolve import envs
    from coevolve.envs.replay import replay_reference
    from coevolve.executors.ray_envs import RayEnvPool

    options = {"seed": 0, "n_train": 6}
    pool = RayEnvPool(ray_head, "toolworld", options)
    local = envs.make("toolworld", **options)
    for task in local.tasks("train")[:3]:
        remote = pool.make()
        assert remote.name == "toolworld"
        assert replay_reference(remote, task) == replay_reference(envs.make("toolworld", **options), task)
        remote.close()
    assert pool.size == 1  # each closed episode gave the actor back for the next one
    with pytest.raises(RuntimeError, match="after close"):
        remote.step("hello")
    remote = pool.make()
    assert remote.demonstrations() == local.demonstrations()  # the interface's optional methods run there
    task = local.tasks("train")[0]
    assert remote.tool_schemas(task) == local.tool_schemas(task)  # other public methods are forwarded too
    remote.reset(task)
    local.reset(task)
    assert remote.state_digest() == local.state_digest()
    draft = (task.initial_state, task.turns, task.solution, task.checker["answers"])
    assert remote.derive_checker(*draft) == local.derive_checker(*draft)
    assert remote.offers(TaskSynthesis) and remote.offers(FreshTasks)  # the roles of the actor's environment
    (call,) = task.solution[0]
    assert remote.argument_literals(call) == local.argument_literals(call)
    with pytest.raises(AttributeError, match="no method 'teleport'"):
        remote.teleport()
    pool.shutdown()


def _wait_until_dead(actor, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.describe.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError(f"the killed actor still answers after {timeout_s} s")


def test_a_dead_actor_is_an_episode_error_and_leaves_the_pool(ray_head):
    from coevolve import envs
    from coevolve.agents.episodes import _step_all
    from coevolve.executors.ray_envs import RayEnvPool

    pool = RayEnvPool(ray_head, "toolworld", {"seed": 0, "n_train": 6})
    task = envs.make("toolworld", seed=0, n_train=6).tasks("train")[0]
    alive, doomed = pool.make(), pool.make()
    for env in (alive, doomed):
        env.reset(task)
    ray.kill(doomed._actor)
    _wait_until_dead(doomed._actor)  # ray.kill only asks: a call sent right after may still be served
    ok, failed = _step_all([alive, doomed], ["no tool needed", "no tool needed"])
    assert ok.turn_ended and isinstance(failed, ray.exceptions.RayActorError)
    doomed.close()
    alive.close()
    assert pool.size == 1
    pool.shutdown()


def test_stages_run_their_episodes_in_actors_with_the_same_results(ray_head, tmp_path):
    from coevolve.flows.run_context import open_run
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.baseline.stage import BASELINE
    from coevolve.stages.bootstrap.stage import BOOTSTRAP
    from coevolve.stages.rollout.stage import ROLLOUT
    from coevolve.storage.catalog import query

    rows = {}
    for where, overrides in [("local", []), ("ray", [f"runtime.ray_address={ray_head}"])]:
        ctx = open_run(_config(overrides), where, tmp_path, quiet=True)
        for stage in (BOOTSTRAP, BASELINE, ROLLOUT):
            assert not run_stage(stage, ctx, 0).cached
        if where == "ray":
            # rollout: 2 tasks x k=4 concurrent episodes, one actor each; the baseline's 4 reused
            assert ctx.remote_envs.size == 8
            ctx.remote_envs.shutdown()
        rows[where] = query(
            tmp_path,
            f"SELECT source, task_id, sample, reward, success, messages "
            f"FROM trajectories WHERE run = '{where}' ORDER BY ALL",
        ).to_pylist()
    assert len(rows["local"]) == 4 + 8
    assert rows["ray"] == rows["local"]
