"""A run is written by one process at a time, and its checkpoints are as safe as its Parquet files: a damaged
checkpoint is recomputed or named with the command that rebuilds it, never loaded silently."""

from __future__ import annotations

import os

import pytest

from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.grpo_update.stage import GRPO_UPDATE
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.storage.layout import RunLayout
from coevolve.storage.lock import RunLockedError, run_lock
from coevolve.storage.parquet import ArtifactError
from tests.conftest import CONFIGS


def test_a_second_writer_is_told_who_holds_the_run(tmp_path):
    layout = RunLayout(tmp_path, "demo")
    holder = rf"process {os.getpid()} .*coevolve run configs/demo.yaml.*since"
    with run_lock(layout, "coevolve run configs/demo.yaml"), pytest.raises(RunLockedError, match=holder), \
            run_lock(layout, "coevolve stage rollout"):
        pass
    with run_lock(layout, "coevolve stage rollout"):  # released with the first holder
        pass


@pytest.fixture(scope="module")
def updated(tmp_path_factory):
    """Round 0 of test-tiny up to its update."""
    ctx = open_run(load_config(CONFIGS / "test-tiny.yaml"), "ck", tmp_path_factory.mktemp("ck"), quiet=True)
    for stage in (BOOTSTRAP, ROLLOUT, GRPO_UPDATE):
        run_stage(stage, ctx, 0)
    return ctx


def fresh(ctx) -> RunContext:
    return open_run(ctx.config, ctx.run, ctx.store.layout.root, quiet=True)


def test_a_truncated_checkpoint_recomputes_its_update_and_a_pruned_one_does_not(updated):
    checkpoint = updated.store.layout.checkpoint_dir(0)
    assert set(updated.store.manifest(0, "grpo_update").files["checkpoints/round=0"]) >= {"model.safetensors"}
    weights = checkpoint / "model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:1000])
    assert not run_stage(GRPO_UPDATE, fresh(updated), 0).cached  # damaged: computed again, intact now
    assert weights.stat().st_size == len(original)
    assert run_stage(GRPO_UPDATE, fresh(updated), 0).cached


def test_a_corrupt_checkpoint_is_one_error_naming_the_file_and_the_rebuild(updated):
    checkpoint = updated.store.layout.checkpoint_dir(0)
    weights = checkpoint / "model.safetensors"
    original = weights.read_bytes()
    try:
        weights.write_bytes(original[:1000])
        with pytest.raises(ArtifactError, match=r"model.safetensors does not load.*coevolve stage grpo_update --run "
                                                r"ck --round 0 --force"):
            fresh(updated).use_policy(0)
    finally:
        weights.write_bytes(original)


def test_leftovers_of_a_killed_update_are_removed_when_the_stage_starts(updated):
    parent = updated.store.layout.checkpoint_dir(0).parent
    (parent / "round=0.tmp-99999").mkdir()
    (parent / "round=0.old-99999").mkdir()
    run_stage(GRPO_UPDATE, fresh(updated), 0, force=True)
    assert sorted(p.name for p in parent.iterdir() if p.is_dir()) == ["round=0"]
