"""Resume after SIGKILL, and two runs under one storage root at once, with real `coevolve run` processes.

Two runs of the same small config start together under one root against a real Prefect server: `whole`
runs uninterrupted; `killed` is SIGKILLed during rollout, re-run, SIGKILLed during grpo_update, left
with a stray half-written artifact, and re-run to completion. Both must end with the same rows: nothing
duplicated, nothing lost, and neither run disturbed the other (including their DuckDB catalog builds).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from coevolve.storage.layout import RunLayout
from tests.conftest import CONFIGS, Spawned, venv_bin, wait_until

pytestmark = pytest.mark.slow

OVERRIDES = ["rollout.tasks_per_round=1", "rollout.k=2", "rollout.max_new_tokens=8", "eval.every=0", "train.beta=0"]
STAGES = ["bootstrap", "rollout", "grpo_update"]
START_TIMEOUT = 240  # a cold process imports torch and Prefect, loads the model: slow on a busy 2-core box


def start(tmp_path, root, run: str, api_url: str, attempt: int) -> Spawned:
    env = {**os.environ, "COEVOLVE_HOME": str(root), "PREFECT_API_URL": api_url,
           "PREFECT_HOME": str(tmp_path / "client-home"), "PREFECT_LOGGING_LEVEL": "WARNING"}
    args = [venv_bin("coevolve"), "run", str(CONFIGS / "test-tiny.yaml"), "--run", run, "--rounds", "1"]
    for override in OVERRIDES:
        args += ["--set", override]
    return Spawned.start(args, tmp_path / f"{run}-{attempt}.log", env)


def content(root, run: str) -> dict[str, list]:
    """Order-free content of a run: what each artifact holds, without the run-specific ids."""
    from coevolve.storage.catalog import query

    def rows(sql: str) -> list:
        return sorted(tuple(r.values()) for r in query(root, sql.replace("$run", f"'{run}'")).to_pylist())

    return {
        "files": rows("SELECT 'trajectories', round, stage FROM trajectories WHERE run = $run UNION ALL "
                      "SELECT 'steps', round, stage FROM steps WHERE run = $run UNION ALL "
                      "SELECT 'samples', round, stage FROM samples WHERE run = $run UNION ALL "
                      "SELECT 'updates', round, stage FROM updates WHERE run = $run UNION ALL "
                      "SELECT 'tasks', round, stage FROM tasks WHERE run = $run UNION ALL "
                      "SELECT 'datasets', round, stage FROM datasets WHERE run = $run"),
        "trajectories": rows("SELECT round, source, task_id, sample, policy_version, reward, success, "
                             "completion_tokens FROM trajectories WHERE run = $run"),
        "samples": rows("SELECT task_id, reward, num_tokens, num_policy_tokens FROM samples WHERE run = $run"),
        # the new policy version hashes the samples file, whose ids contain the run name: not compared
        "updates": rows("SELECT round, base_version, tokens, samples, checkpoint LIKE '%round=0' "
                        "FROM updates WHERE run = $run"),
    }


def stray_update_row(layout: RunLayout) -> None:
    """What a kill between writing an artifact and writing its manifest leaves behind."""
    from coevolve.storage.parquet import write_table
    from coevolve.storage.schemas import UPDATES

    row = {name: 0 for name in UPDATES.names} | {
        "run": layout.run, "round": 0, "base_version": "stray", "policy_version": "stray", "checkpoint": "stray"}
    write_table(pa.Table.from_pylist([row], schema=UPDATES), layout.artifact_path(0, "grpo_update", "updates"))


def test_sigkill_then_rerun_loses_and_duplicates_nothing_next_to_a_concurrent_run(tmp_path, prefect_server):
    from coevolve.storage.catalog import build_catalog

    root = tmp_path / "runs"
    layout = RunLayout(root, "killed")
    manifest = layout.manifest_path
    whole = start(tmp_path, root, "whole", prefect_server, 0)
    killed = start(tmp_path, root, "killed", prefect_server, 0)
    try:
        # rollout starts right after bootstrap's manifest: kill while it loads the model and generates
        wait_until(lambda: manifest(0, "bootstrap").exists(), START_TIMEOUT, "bootstrap finished", watch=killed)
        killed.kill()
        assert not manifest(0, "rollout").exists()

        killed = start(tmp_path, root, "killed", prefect_server, 1)
        wait_until(lambda: manifest(0, "rollout").exists(), START_TIMEOUT, "rollout finished", watch=killed)
        killed.kill()  # during grpo_update
        assert not manifest(0, "grpo_update").exists()
        stray_update_row(layout)

        killed = start(tmp_path, root, "killed", prefect_server, 2)
        assert killed.wait(START_TIMEOUT) == 0, killed.output()
        assert whole.wait(START_TIMEOUT) == 0, whole.output()
    finally:
        killed.kill()
        whole.kill()

    assert "computed: grpo_update; the rest cached" in killed.output()  # bootstrap and rollout cached
    resumed, reference = content(root, "killed"), content(root, "whole")
    assert resumed == reference
    assert {f[0] for f in resumed["files"]} == {"trajectories", "steps", "samples", "updates", "tasks", "datasets"}
    assert len(resumed["updates"]) == 1 and "stray" not in resumed["updates"][0]
    assert [s for s in STAGES if manifest(0, s).exists()] == STAGES
    assert not list(root.glob("run=*/round=*/stage=*/.*.tmp-*"))  # no half-written file left visible or not
    assert build_catalog(root) is not None
