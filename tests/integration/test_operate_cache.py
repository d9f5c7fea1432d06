"""Re-running stages from cache with `coevolve stage`, on copies of one small real run (test-tiny.yaml,
one round): unchanged inputs are 'cached'; `--set` on a value a stage reads recomputes that stage, is
saved into the run's config, and makes exactly its dependents recompute when the flow runs again; a
corrupt input names the command that rebuilds it, and that command works."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from tests.conftest import CONFIGS

pytestmark = pytest.mark.slow

RUN = "cache"
CHEAP = ["rollout.tasks_per_round=1", "rollout.k=2", "rollout.max_new_tokens=12", "eval.max_tasks=1", "train.beta=0"]
ROUND0 = ["bootstrap", "baseline", "rollout", "grpo_update", "evaluate"]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, prefect_api):
    from coevolve.flows.coevolve import coevolve

    root = tmp_path_factory.mktemp("cache-base")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COEVOLVE_HOME", str(root))
        coevolve(str(CONFIGS / "test-tiny.yaml"), run=RUN, rounds=1, overrides=CHEAP)
    return root


@pytest.fixture
def run_copy(base_run, tmp_path, monkeypatch):
    shutil.copytree(base_run / f"run={RUN}", tmp_path / f"run={RUN}")
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    return RunLayout(tmp_path, RUN)


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def stamps(layout: RunLayout) -> dict[str, tuple[str, float]]:
    """Cache key and start time of every round-0 stage: a recompute changes the start time."""
    return {s: (m.key, m.started_at) for s in ROUND0 if (m := Manifest.read(layout.manifest_path(0, s)))}


def test_unchanged_stage_is_cached(run_copy):
    before = stamps(run_copy)
    for stage in ("rollout", "grpo_update", "evaluate"):
        result = cli("stage", stage, "--run", RUN, "--round", "0")
        assert result.exit_code == 0, result.output
        assert f"{stage} round 0: cached" in result.output
    assert stamps(run_copy) == before


def test_changed_value_recomputes_the_stage_then_its_dependents(run_copy):
    before = stamps(run_copy)
    result = cli("stage", "rollout", "--run", RUN, "--round", "0", "--set", "rollout.max_new_tokens=8")
    assert result.exit_code == 0, result.output
    assert "rollout round 0: computed" in result.output and "note: saved rollout.max_new_tokens=8" in result.output
    assert "max_new_tokens: 8" in run_copy.config_path.read_text()
    after_stage = stamps(run_copy)
    assert after_stage["rollout"][0] != before["rollout"][0]
    assert {s: after_stage[s] for s in ROUND0 if s != "rollout"} == {s: before[s] for s in ROUND0 if s != "rollout"}

    result = cli("run", "--run", RUN)  # continues with the saved config
    assert result.exit_code == 0, result.output
    after_flow = stamps(run_copy)
    recomputed = {s for s in ROUND0 if after_flow[s] != after_stage[s]}
    # grpo_update reads rollout's samples and section; evaluate the new policy; baseline reads the rollout
    # section (max_new_tokens bounds its replies too); bootstrap reads none of it.
    assert recomputed == {"grpo_update", "evaluate", "baseline"}

    again = cli("stage", "grpo_update", "--run", RUN, "--round", "0")
    assert "grpo_update round 0: cached" in again.output


def test_corrupt_input_names_the_stage_to_rerun_and_that_fixes_it(run_copy):
    samples = run_copy.artifact_path(0, "rollout", "samples")
    samples.write_bytes(samples.read_bytes()[:100])
    result = cli("stage", "grpo_update", "--run", RUN, "--round", "0", "--force")
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"corrupt artifact {samples}" in text
    assert f"coevolve stage rollout --run {RUN} --round 0 --force" in text

    fixed = cli("stage", "rollout", "--run", RUN, "--round", "0", "--force")
    assert fixed.exit_code == 0 and "computed" in fixed.output
    update = cli("stage", "grpo_update", "--run", RUN, "--round", "0")
    assert update.exit_code == 0 and "computed" in update.output
