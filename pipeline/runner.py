"""The one way a stage runs: cache key -> skip if the manifest matches -> run -> write -> manifest.

A stage is a `StageDef`: a name, a code version (bump it when the stage's output for the same inputs
changes), the config sections it reads, a function naming its inputs (content hashes of upstream
manifests, policy versions) and the pure-ish function that computes its artifacts.

    record = run_stage(ROLLOUT, ctx, round_=3)        # StageRecord(manifest, cached=True/False)
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from coevolve.pipeline.context import RunContext
from coevolve.storage.manifest import Manifest, cache_key
from coevolve.storage.parquet import ArtifactError, file_sha256


@dataclass(frozen=True)
class StageResult:
    artifacts: dict[str, list[dict[str, Any]] | pa.Table]
    outputs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageDef:
    name: str
    version: int
    sections: tuple[str, ...]
    inputs: Callable[[RunContext, int], dict[str, str]]
    compute: Callable[[RunContext, int, str], StageResult]
    """(context, round, cache key) -> artifacts and outputs."""


@dataclass(frozen=True)
class StageRecord:
    manifest: Manifest
    cached: bool


def stage_key(stage: StageDef, ctx: RunContext, round_: int) -> str:
    return cache_key(stage.name, stage.version, ctx.config.section(*stage.sections), stage.inputs(ctx, round_))


def is_cached(stage: StageDef, ctx: RunContext, round_: int, key: str) -> Manifest | None:
    """The stage's manifest if it has this cache key and every artifact file still has the recorded
    content (sha256); a missing, truncated or edited file means the stage runs again."""
    manifest = ctx.store.manifest(round_, stage.name)
    if manifest is None or manifest.key != key:
        return None
    for name, ref in manifest.artifacts.items():
        path = ctx.store.layout.artifact_path(round_, stage.name, name)
        if not path.exists() or file_sha256(path) != ref.sha256:
            return None
    return manifest


def run_stage(stage: StageDef, ctx: RunContext, round_: int, *, force: bool = False) -> StageRecord:
    """Run `stage` for `round_` unless a completed run with the same cache key exists."""
    key = stage_key(stage, ctx, round_)
    if not force and (cached := is_cached(stage, ctx, round_, key)) is not None:
        return StageRecord(cached, cached=True)
    ctx.store.invalidate(round_, stage.name)
    manifest = Manifest(stage.name, ctx.run, round_, key, stage.version, started_at=time.time())
    try:
        result = stage.compute(ctx, round_, key)
        for name, rows in result.artifacts.items():
            manifest.artifacts[name] = ctx.store.write(round_, stage.name, name, rows)
        manifest.outputs = result.outputs
        ctx.store.write_manifest(manifest.finish())
    except Exception as exc:
        if not _disk_full(exc):
            raise
        raise DiskFullError(
            f"stage '{stage.name}' of round {round_} in run '{ctx.run}' stopped: no space left on the device "
            f"holding {ctx.store.layout.root} ({exc}). Free space (each kept checkpoint is a whole model: "
            f"lower train.keep_checkpoints) and run the same command again: completed stages are kept."
        ) from exc
    return StageRecord(manifest, cached=False)


class DiskFullError(ArtifactError):
    """A stage could not write its outputs (artifacts, checkpoint) because the disk is full."""


def _disk_full(exc: BaseException | None) -> bool:
    """Whether `exc` or an exception it came from is ENOSPC; libraries that write in native code
    (safetensors) raise their own types whose message carries the OS error."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
