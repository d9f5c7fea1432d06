"""The stage runner's failure path: a full disk stops a stage with one error that names the stage and
says what to do (the CLI prints it as a paragraph), other failures pass through, completed stages stay."""

from __future__ import annotations

import errno

import pytest

from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.runner import DiskFullError, run_stage
from coevolve.pipeline.stage import StageDef, StageResult
from coevolve.storage.parquet import ArtifactError
from tests.conftest import CONFIGS


def _stage(name: str, failure: Exception | None = None) -> StageDef:
    def compute(ctx, round_, inputs):
        if failure is not None:
            raise failure
        return StageResult({}, {"done": True})

    return StageDef(name, 1, config=("rollout",), reads={}, compute=compute)


@pytest.fixture
def ctx(tmp_path):
    return open_run(load_config(CONFIGS / "test-tiny.yaml"), "demo", tmp_path, quiet=True)


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        ),  # safetensors
    ],
)
def test_a_full_disk_stops_the_stage_with_an_error_saying_what_to_do(ctx, failure):
    assert not run_stage(_stage("rollout"), ctx, 2).cached
    with pytest.raises(
        DiskFullError, match=r"stage 'grpo_update' of round 2 in run 'demo'.*keep_checkpoints"
    ):
        run_stage(_stage("grpo_update", failure), ctx, 2)
    assert ctx.store.manifest(2, "grpo_update") is None
    assert ctx.store.manifest(2, "rollout").outputs == {"done": True}
    assert issubclass(DiskFullError, ArtifactError)  # shown by the CLI as one paragraph, no traceback


def test_other_failures_pass_through_unchanged(ctx):
    with pytest.raises(ValueError, match="^malformed$"):
        run_stage(_stage("rollout", ValueError("malformed")), ctx, 0)
