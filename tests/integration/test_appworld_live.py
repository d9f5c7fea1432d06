"""A real AppWorld episode through `appworld serve environment` (needs AppWorld, its data and a server).

    python3 -m venv .venv-appworld && .venv-appworld/bin/pip install appworld \
      && .venv-appworld/bin/appworld install && .venv-appworld/bin/appworld download data
    .venv-appworld/bin/appworld serve environment --port 8000 &        # from the folder holding data/
    APPWORLD_URL=http://127.0.0.1:8000 .venv/bin/pytest -m appworld tests/integration/test_appworld_live.py

Skipped unless $APPWORLD_URL is set and `check_environment("appworld")` finds everything in place.
"""

from __future__ import annotations

import json
import os

import pytest

from coevolve.envs.appworld import AppWorldEnv
from coevolve.flows.env_check import check_environment, ready

pytestmark = pytest.mark.appworld

SPLIT_SIZES = {"train": 90, "dev": 57, "test_normal": 168, "test_challenge": 417}


@pytest.fixture(scope="module")
def live_url() -> str:
    url = os.environ.get("APPWORLD_URL")
    if not url:
        pytest.skip(
            "APPWORLD_URL is not set: install AppWorld and its data in .venv-appworld, start "
            "`.venv-appworld/bin/appworld serve environment --port 8000` and set "
            "APPWORLD_URL=http://127.0.0.1:8000"
        )
    findings = check_environment("appworld", {"base_url": url})
    if not ready(findings):
        pytest.skip("AppWorld is not ready:\n" + "\n".join(findings))
    return url


def test_split_files_have_the_published_sizes(live_url):
    env = AppWorldEnv(base_url=live_url)
    assert {split: len(env.task_ids(split)) for split in SPLIT_SIZES} == SPLIT_SIZES


def test_a_real_episode_runs_and_is_scored(live_url):
    env = AppWorldEnv(base_url=live_url, timeout=120)
    task = env.tasks("dev")[0]
    obs = env.reset(task)
    assert obs.messages[0]["content"] == task.turns[0]
    step = env.step("```python\nprint(apis.api_docs.show_app_descriptions())\n```")
    assert step.info["calls"][0]["ok"] and "spotify" in step.messages[0]["content"]
    assert not step.done
    call = {"name": "execute", "arguments": {"code": "apis.supervisor.complete_task()"}}
    step = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert step.done and step.info.get("completed"), step.messages
    evaluation = env.evaluate()
    assert evaluation.details["num_tests"] > 0
    assert not evaluation.success and 0.0 <= evaluation.reward < 0.5  # a no-op answer fails AppWorld's tests
    env.close()
