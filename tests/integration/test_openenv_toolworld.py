"""The built-in tool world served as an OpenEnv environment (`envs.openenv.toolworld_server` under OpenEnv's
`create_app` and uvicorn on 127.0.0.1, started and stopped here) through the adapter (`env.name: openenv`,
`url`): the reference solutions of every split replay to the native environment's rewards, state digests,
tool schemas and tool messages; the served environment reads its own tasks and verifies candidates."""

from __future__ import annotations

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from coevolve import envs  # noqa: E402
from tests.fakes.openenv_inventory import served_inventory  # noqa: E402
from tests.unit.test_openenv_toolworld import PER_SPLIT, played  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APP = "coevolve.envs.openenv.toolworld_server:create_toolworld_app"


@pytest.fixture(scope="module")
def served():
    with served_inventory(APP) as url:
        yield url


@pytest.mark.parametrize("split", ["train", "test", "validation", "heldout-templates"])
def test_served_reference_replays_match_the_native_environment(served, split):
    native, remote = envs.make("toolworld"), envs.make("openenv", url=served)
    pairs = list(zip(native.tasks(split), remote.tasks(split), strict=True))[:PER_SPLIT]
    for own, task in pairs:
        through_server, at_home = played(remote, task, own), played(native, own, own)
        remote.close()
        assert through_server == at_home, own.id
        assert at_home[:2] == (1.0, True)


def test_the_served_environment_verifies_candidates_by_its_own_reward(served):
    native, remote = envs.make("toolworld"), envs.make("openenv", url=served)
    own, task = next((o, t) for o, t in zip(native.tasks("train"), remote.tasks("train"), strict=True)
                     if o.checker["final_state"] != o.initial_state)  # fmt: skip
    checker = remote.derive_checker(task.initial_state, task.turns, own.solution, [[]])
    assert checker["reference_reward"] == 1.0 and checker["idle_reward"] < 0.5
    with pytest.raises(ValueError, match="reference calls reward 0.[0-4]"):
        remote.derive_checker(task.initial_state, task.turns, [[]], [[]])
