"""Bounded staleness (`rollout.max_staleness: 1`) on test-tiny, 3 rounds, through `coevolve run`: round r
samples with the policy after round r-2, the rollout of round r+1 runs as a Prefect task beside the update of
round r (their task runs' recorded times overlap), the stage's manifest and cache key name the checkpoint it
sampled with, and a run killed in the middle of the overlapped rollout continues to the rows and weights of
the uninterrupted run.

Runs use AdamW weight decay (as tests/integration/test_faults.py explains: test-tiny's updates move no
weight otherwise, so "the same weights" would hold whichever checkpoint a rollout loaded) and one math thread
(`OMP_NUM_THREADS=1`), so the overlapped and the resumed computations run with the same threads.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import CONFIGS, REPO
from tests.integration.test_faults import MOVING, rows_of, run_in_own_group

pytestmark = pytest.mark.slow

RUN = "stale"


def coevolve(root: Path, api: str, *, kill: str | None = None):
    """test-tiny, 3 rounds, staleness 1, in `root` (killed as tests/fault_injection/sitecustomize.py says)."""
    env = {**os.environ, "PREFECT_API_URL": api, "PYTHONPATH": str(REPO / "tests" / "fault_injection"),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    env.pop("COEVOLVE_TEST_KILL", None)
    if kill:
        env["COEVOLVE_TEST_KILL"] = kill
    command = [str(Path(sys.executable).with_name("coevolve")), "run", str(CONFIGS / "test-tiny.yaml"),
               "--rounds", "3", "--run", RUN, "--set", MOVING, "--set", "rollout.max_staleness=1",
               "--set", "train.vllm_importance_sampling_correction=true",
               # an update of 12 epochs outlasts the start of the task beside it, even on a loaded machine
               "--set", "train.epochs=12",
               "--root", str(root)]  # fmt: skip
    return run_in_own_group(command, env, 900)


def manifest(root: Path, round_: int, stage: str) -> dict:
    return json.loads((root / f"run={RUN}" / f"round={round_}" / f"stage={stage}" / "_manifest.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory, prefect_server) -> Path:
    root = tmp_path_factory.mktemp("stale")
    done = coevolve(root, prefect_server)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_round_2_samples_with_the_round_0_checkpoint(reference):
    rollouts = [manifest(reference, r, "rollout") for r in range(3)]
    update_0 = manifest(reference, 0, "grpo_update")["outputs"]["policy_version"]
    assert [m["outputs"]["policy_round"] for m in rollouts] == [-1, -1, 0]
    assert [m["outputs"]["staleness"] for m in rollouts] == [0, 1, 1]
    assert rollouts[2]["outputs"]["policy_checkpoint"] == "checkpoints/round=0"
    assert rollouts[2]["outputs"]["policy_version"] == update_0
    assert {"round": 0, "stage": "grpo_update", "field": "outputs.policy_version", "value": update_0} in \
        rollouts[2]["read_from"]  # what its cache key hashed, so a cached re-run is exact
    from coevolve.storage.catalog import query

    used = query(reference, "SELECT DISTINCT round, policy_version FROM trajectories WHERE source = 'rollout' "
                            "ORDER BY round").to_pylist()  # fmt: skip
    assert used[2] == {"round": 2, "policy_version": update_0}
    assert used[0]["policy_version"] == used[1]["policy_version"] == rollouts[0]["outputs"]["policy_version"]


def test_the_next_rollout_runs_beside_the_update(reference, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterTags
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: prefect_server}), get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(tags=TaskRunFilterTags(all_=[f"run:{RUN}"])))
    times = {run.name: (run.start_time, run.end_time) for run in runs if run.state.name == "Completed"}
    for round_ in (0, 1):
        rollout, update = times[f"rollout[{round_ + 1}]"], times[f"grpo_update[{round_}]"]
        # begun before the update ended: a synchronous flow starts round r+1's rollout only after round r's
        # update (test-tiny's rollout takes a fraction of a second, so it may end before Prefect records the
        # update's start: the overlap is asserted from the rollout's side)
        assert rollout[0] < update[1], (round_, rollout, update)


def test_a_run_killed_in_the_overlapped_rollout_resumes_to_the_same_data(tmp_path, reference, prefect_server):
    from coevolve.flows.compare import compare_runs
    from coevolve.storage.layout import RunLayout

    killed = coevolve(tmp_path, prefect_server, kill="before:round=2/stage=rollout/samples.parquet:1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (tmp_path / f"run={RUN}" / "round=2" / "stage=rollout" / "_manifest.json").exists()
    resumed = coevolve(tmp_path, prefect_server)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    compared, differences = compare_runs(RunLayout(reference, RUN), RunLayout(tmp_path, RUN))
    assert compared > 0 and differences == []
    assert rows_of(tmp_path) == rows_of(reference)
