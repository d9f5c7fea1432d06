"""`coevolve compare`: whether two runs computed the same thing, from their stage manifests.

Manifests record the sha256 of every artifact a stage wrote and of every file of its checkpoint folders
(`storage.manifest`), never timings, so two runs of one config on one machine agree on every hash
exactly when they wrote the same rows and the same weights. That is the check a change that should not
change behaviour (a refactor, a dependency bump) passes: run a config before and after it under one run
name in two storage roots (rows and ids carry the run's name), then compare.
Cache keys are reported apart: a change to a stage's declaration changes its key and nothing it writes.
Hashes in manifests say what was written, not what is there now: `changed_files` checks every file a
manifest lists against its sha256 (`parquet.file_matches`, the check `coevolve run` makes before trusting a
stage), so a bit flipped since, even with its modification time put back, is named, never compared as equal.
An artifact whose files differ is read back: rows equal but for their timing columns (`schemas.TIMINGS`,
the seconds an update took) are the same computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from coevolve.file_hashes import dropped_on_purpose
from coevolve.storage.layout import MANIFEST, RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import changed_in_folder, file_matches
from coevolve.storage.schemas import TIMINGS


@dataclass(frozen=True)
class Difference:
    """One stage output (or a whole stage) present or hashed differently in the two runs."""

    round: int
    stage: str
    what: str
    """`artifact NAME`, `file FOLDER/NAME`, `stage` (run by one run only) or `key` (cache key only)."""
    left: str
    right: str


def _manifests(layout: RunLayout) -> dict[tuple[int, str], Manifest]:
    found = {}
    for path in sorted(layout.run_dir.glob(f"round=*/stage=*/{MANIFEST}")):
        manifest = Manifest.read(path)
        if manifest is not None:
            found[(manifest.round, manifest.stage)] = manifest
    return found


def changed_files(layout: RunLayout) -> list[Path]:
    """The files of the run that do not hold what its manifests record (a different sha256, or gone): its
    stages' artifacts and the files of their checkpoint folders. A checkpoint folder that is gone was
    pruned on purpose (`train.keep_checkpoints`) and is not checked, as `coevolve run` does not, nor is a file
    deleted on purpose (`parquet.changed_in_folder`)."""
    changed = []
    for manifest in _manifests(layout).values():
        for name, ref in manifest.artifacts.items():
            path = layout.artifact_path(manifest.round, manifest.stage, name)
            changed += [] if file_matches(path, ref.sha256, ref.size) else [path]
        for folder, refs in manifest.files.items():
            directory = layout.run_dir / folder
            if directory.is_dir():
                changed += [directory / name for name in changed_in_folder(directory, refs)]
    return changed


def _hashes(manifest: Manifest, layout: RunLayout) -> dict[str, str]:
    """What a stage run wrote, by artifact and checkpoint file; a file deleted on purpose since (an optimizer
    state a newer checkpoint took over: `file_hashes.dropped_on_purpose`) is no longer part of it."""
    out = {f"artifact {name}": ref.sha256 for name, ref in manifest.artifacts.items()}
    for folder, refs in manifest.files.items():
        out |= {f"file {folder}/{name}": ref.sha256 for name, ref in refs.items()
                if not dropped_on_purpose(layout.run_dir / folder / name)}  # fmt: skip
    return out


def _same_but_timings(left: RunLayout, right: RunLayout, round_: int, stage: str, what: str) -> bool:
    """Whether an artifact whose files differ holds the same rows once its timing columns are dropped."""
    kind, _, name = what.partition(" ")
    if kind != "artifact" or name not in TIMINGS:
        return False
    try:
        tables = [pq.read_table(layout.artifact_path(round_, stage, name)) for layout in (left, right)]
    except OSError:  # a file gone since its manifest was written: the difference stands
        return False
    kept = [t.drop_columns([c for c in TIMINGS[name] if c in t.column_names]) for t in tables]
    return kept[0].equals(kept[1])


def compare_runs(left: RunLayout, right: RunLayout) -> tuple[int, list[Difference]]:
    """(outputs compared, differences) between two runs' stages, by round then stage."""
    ours, theirs = _manifests(left), _manifests(right)
    compared, differences = 0, []
    for round_, stage in sorted(ours.keys() | theirs.keys()):
        a, b = ours.get((round_, stage)), theirs.get((round_, stage))
        if a is None or b is None:
            differences.append(Difference(round_, stage, "stage", "ran" if a else "absent", "ran" if b else "absent"))
            continue
        mine, yours = _hashes(a, left), _hashes(b, right)
        for what in sorted(mine.keys() | yours.keys()):
            compared += 1
            if mine.get(what) != yours.get(what) and not _same_but_timings(left, right, round_, stage, what):
                differences.append(Difference(round_, stage, what, mine.get(what, "absent")[:16],
                                              yours.get(what, "absent")[:16]))  # fmt: skip
        if a.key != b.key:
            differences.append(Difference(round_, stage, "key", a.key, b.key))
    return compared, differences
