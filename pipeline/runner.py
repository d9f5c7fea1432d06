"""The one way a stage runs: cache key -> skip if the manifest matches -> run -> write -> manifest.

The key is derived from the stage's declaration (`pipeline.stage.StageDef`): its name and code version,
the values of the config fields it declares, and the content hash of every input it declares (the
sha256 of upstream artifact files, dataset versions, policy versions, environment task ids). Manifests
record artifact hashes, so a forced re-run that writes identical rows leaves every downstream key, and so
every downstream stage, as it was.

    record = run_stage(ROLLOUT, ctx, round_=3)        # StageRecord(manifest, cached=True/False)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from coevolve.core import content_hash
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.sources import read_sources
from coevolve.pipeline.stage import Inputs, StageDef
from coevolve.run_files import DiskFullError, disk_full
from coevolve.storage.manifest import FileRef, Manifest, cache_key
from coevolve.storage.parquet import changed_in_folder, file_matches

__all__ = ["DiskFullError", "StageRecord", "folder_refs", "is_cached", "read_sources", "run_stage", "stage_key"]


@dataclass(frozen=True)
class StageRecord:
    manifest: Manifest
    cached: bool


def stage_key(stage: StageDef, ctx: RunContext, round_: int) -> str:
    """The cache key of `stage` in round `round_`: what it declares it depends on, hashed."""
    inputs = {name: read.key_part(ctx, round_) for name, read in stage.reads.items()}
    return cache_key(stage.name, stage.version, ctx.config.select(stage.config), inputs)


def is_cached(stage: StageDef, ctx: RunContext, round_: int, key: str) -> Manifest | None:
    """The stage's manifest if it has this cache key and every file it wrote still has the recorded content
    (sha256, each file read at most once per process; an unchanged size and mtime prove nothing): a
    missing, truncated or edited artifact means the stage runs again, and so does a damaged checkpoint,
    even one whose modification time was put back. A checkpoint folder that is gone was pruned on purpose
    (`train.keep_checkpoints`) and does not count, nor does a file of it deleted on purpose (an optimizer
    state a newer checkpoint took over: `changed_in_folder`)."""
    manifest = ctx.store.manifest(round_, stage.name)
    if manifest is None or manifest.key != key:
        return None
    for name, ref in manifest.artifacts.items():
        path = ctx.store.layout.artifact_path(round_, stage.name, name)
        if not file_matches(path, ref.sha256, ref.size):
            return None
    for folder, refs in manifest.files.items():
        directory = ctx.store.layout.run_dir / folder
        if directory.exists() and changed_in_folder(directory, refs):
            return None
    return manifest


def run_stage(stage: StageDef, ctx: RunContext, round_: int, *, force: bool = False) -> StageRecord:
    """Run `stage` for `round_` unless a completed run with the same cache key exists. When output is not a
    terminal (`RunContext.plain_output`: a log file), a plain line when it starts and one when it ends:

        round 0 rollout: started
        round 0 rollout: done in 41.2 s (cached)
    """
    started = time.perf_counter()
    ctx.say(f"round {round_} {stage.name}: started")
    try:
        record = _run_stage(stage, ctx, round_, force=force)
    except BaseException:
        ctx.say(f"round {round_} {stage.name}: failed after {time.perf_counter() - started:.1f} s")
        raise
    cached = " (cached)" if record.cached else ""
    ctx.say(f"round {round_} {stage.name}: done in {time.perf_counter() - started:.1f} s{cached}")
    return record


def config_hash(stage: StageDef, ctx: RunContext) -> str:
    """The hash of the stage's declared config fields in the run's config as written (what `config.yaml`
    holds), recorded in its manifest so a later change of the saved config shows it stale."""
    return content_hash(ctx.spec.select(stage.config), length=24)


def _with_provenance(manifest: Manifest, stage: StageDef, ctx: RunContext, round_: int) -> bool:
    """Record in `manifest` what its key read from upstream and its config's hash; whether that changed."""
    provenance = (read_sources(stage, ctx, round_), list(stage.config), config_hash(stage, ctx))
    if (manifest.read_from, manifest.config_fields, manifest.config_hash) == provenance:
        return False
    manifest.read_from, manifest.config_fields, manifest.config_hash = provenance
    return True


def _run_stage(stage: StageDef, ctx: RunContext, round_: int, *, force: bool) -> StageRecord:
    key = stage_key(stage, ctx, round_)
    if not force and (cached := is_cached(stage, ctx, round_, key)) is not None:
        if _with_provenance(cached, stage, ctx, round_):  # a manifest of older code, or a fork's copy
            ctx.store.write_manifest(cached)
        return StageRecord(cached, cached=True)
    ctx.store.invalidate(round_, stage.name)
    manifest = Manifest(stage.name, ctx.run, round_, key, stage.version, started_at=time.time())
    _with_provenance(manifest, stage, ctx, round_)
    try:
        view = StageContext(ctx, stage.config, stage.name)  # the config its key covers, nothing more
        result = stage.compute(view, round_, Inputs(ctx, round_, stage.reads, key))
        if stage.writes is not None:
            stage.writes.check(stage.name, set(result.artifacts))
        for name, rows in result.artifacts.items():
            manifest.artifacts[name] = ctx.store.write(round_, stage.name, name, rows)
        manifest.files = {str(folder.relative_to(ctx.store.layout.run_dir)): folder_refs(folder)
                          for folder in result.folders}  # fmt: skip
        manifest.outputs = result.outputs
        ctx.store.write_manifest(manifest.finish())
        if result.after_manifest is not None:
            result.after_manifest()
    except Exception as exc:
        full = disk_full(exc, ctx.store.layout.run_dir)
        if full is None:
            raise
        raise DiskFullError(
            f"stage '{stage.name}' of round {round_} in run '{ctx.run}' stopped: {full.cause}. {full.advice} "
            f"(each kept checkpoint is a whole model: lower train.keep_checkpoints) and run the same command "
            f"again: completed stages are kept.", cause=full.cause, advice=full.advice) from exc
    return StageRecord(manifest, cached=False)


def folder_refs(folder: Path) -> dict[str, FileRef]:
    """The content hash of every file in `folder` (recursively), by path relative to it."""
    return {str(p.relative_to(folder)): FileRef.of(p) for p in sorted(folder.rglob("*")) if p.is_file()}
