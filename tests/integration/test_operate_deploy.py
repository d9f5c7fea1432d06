"""The deployment end to end, as the README tells a user to run it: a real Prefect server, `coevolve
serve` in its own process, `prefect deployment run coevolve/round -p ... -p more=1 --watch`, then the
new rows in DuckDB. A second trigger with only `run` and `more` continues the run from its saved config."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import CONFIGS, Spawned, venv_bin, wait_until

pytestmark = pytest.mark.slow

OVERRIDES = ["rollout.tasks_per_round=1", "rollout.k=2", "rollout.max_new_tokens=8", "eval.every=0", "train.beta=0"]
TIMEOUT = 300


def trigger(env: dict[str, str], *params: str) -> subprocess.CompletedProcess:
    args = [venv_bin("prefect"), "deployment", "run", "coevolve/round", "--watch", "--watch-timeout", str(TIMEOUT)]
    for param in params:
        args += ["-p", param]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=TIMEOUT + 60)


def deployment_runs(api_url: str) -> list[dict]:
    """The flow runs of any deployment (the server is shared with other tests' plain runs), oldest first."""
    import httpx

    response = httpx.post(f"{api_url}/flow_runs/filter", json={"limit": 50, "sort": "EXPECTED_START_TIME_ASC"},
                          timeout=10)  # fmt: skip
    response.raise_for_status()
    return [run for run in response.json() if run["deployment_id"]]


def test_served_deployment_runs_the_next_rounds(tmp_path, prefect_server):
    import httpx

    from coevolve.storage.catalog import query

    root = tmp_path / "runs"
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "PREFECT_HOME": str(tmp_path / "client-home"),
           "PREFECT_RUNNER_POLL_FREQUENCY": "1", "PREFECT_LOGGING_LEVEL": "WARNING"}
    env.pop("COEVOLVE_HOME", None)  # the storage root comes from `serve --root` alone
    serve = Spawned.start([venv_bin("coevolve"), "serve", "--root", str(root)], tmp_path / "serve.log", env)
    try:
        def deployed() -> bool:
            return httpx.get(f"{prefect_server}/deployments/name/coevolve/round", timeout=5).status_code == 200

        wait_until(deployed, 120, "deployment coevolve/round registered", watch=serve, every=0.5)

        first = trigger(env, f"config={CONFIGS / 'test-tiny.yaml'}", "run=demo", "more=1",
                        f"overrides={json.dumps(OVERRIDES)}")
        assert first.returncode == 0, first.stdout + first.stderr + serve.output()
        rounds = query(root, "SELECT round, stage, count(*) AS n FROM trajectories WHERE run = 'demo' "
                             "GROUP BY ALL ORDER BY ALL").to_pylist()
        assert rounds == [{"round": 0, "stage": "rollout", "n": 2}]

        second = trigger(env, "run=demo", "more=1")  # the saved config, one more round
        assert second.returncode == 0, second.stdout + second.stderr + serve.output()
        rounds = query(root, "SELECT round, count(*) AS n FROM trajectories WHERE run = 'demo' AND "
                             "source = 'rollout' GROUP BY ALL ORDER BY ALL").to_pylist()
        assert rounds == [{"round": 0, "n": 2}, {"round": 1, "n": 2}]
        updates = query(root, "SELECT round, base_version, policy_version FROM updates ORDER BY round").to_pylist()
        assert updates[1]["base_version"] == updates[0]["policy_version"]
        runs = deployment_runs(prefect_server)
        assert sorted((r["name"], r["state_type"]) for r in runs) == [("demo +1 round (round 0)", "COMPLETED"),
                                                                       ("demo +1 round (round 1)", "COMPLETED")]
    finally:
        serve.kill()
    assert serve.proc.poll() is not None
