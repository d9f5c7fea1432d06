"""Stage manifests and cache keys.

A stage run writes its artifacts, then `_manifest.json` last (atomically). The manifest holds the stage's
cache key: a hash of the stage name, its code version, the config fields it declares, and the content
hashes of the inputs it declares (`pipeline.stage`). A later run of the same stage with the same key is
skipped; any change recomputes it, and through the changed sha256 of its artifact files, its dependents.
Outputs (metrics, timings) are recorded but never hashed: a re-run that writes the same rows changes no
downstream key.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coevolve.core import content_hash
from coevolve.file_hashes import file_sha256
from coevolve.storage.parquet import ArtifactError, write_text_atomic


def cache_key(stage: str, code_version: int, config: Any, inputs: dict[str, str]) -> str:
    """Key of a stage run; `inputs` maps input names to content hashes (or policy version ids)."""
    return content_hash(
        {"stage": stage, "code_version": code_version, "config": config, "inputs": inputs}, length=24
    )


@dataclass(frozen=True)
class ArtifactRef:
    """A written artifact: what a Prefect task hands to the next one (never the frame itself)."""

    name: str
    path: str
    rows: int
    sha256: str
    schema_version: int
    size: int = -1
    mtime_ns: int = -1
    """Size and modification time when written: a different size is a changed file without reading it;
    an unchanged stat proves nothing (the sha256 decides, `parquet.file_matches`)."""


@dataclass(frozen=True)
class FileRef:
    """A file a stage wrote besides its artifacts (a checkpoint's weights): its content hash and stat."""

    sha256: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileRef:
        stat = path.stat()
        return cls(file_sha256(path), stat.st_size, stat.st_mtime_ns)


@dataclass(frozen=True)
class InputRef:
    """One value a stage's cache key hashed from an upstream stage run: `field` of the manifest of `stage` in
    `round` (`artifacts.<name>`: that artifact's sha256; `outputs.<name>`: an output, e.g. the policy
    version) and the value it had when the stage ran."""

    round: int
    stage: str
    field: str
    value: str

    def current(self, manifest: Manifest) -> str | None:
        """The value of `field` in `manifest` (the upstream stage's manifest now), None when it has none."""
        kind, _, name = self.field.partition(".")
        if kind == "artifacts":
            return manifest.artifacts[name].sha256 if name in manifest.artifacts else None
        value = manifest.outputs.get(name) if kind == "outputs" else None
        return None if value is None else str(value)


@dataclass
class Manifest:
    stage: str
    run: str
    round: int
    key: str
    code_version: int
    artifacts: dict[str, ArtifactRef] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    """Small JSON results of the stage (metrics, the policy version it produced, ...)."""
    started_at: float = 0.0
    seconds: float = 0.0
    forked_from: str | None = None
    """The run this stage run was copied from (`flows.fork`), or None when computed here."""
    files: dict[str, dict[str, FileRef]] = field(default_factory=dict)
    """Other files the stage wrote, by folder (relative to the run's folder, e.g. `checkpoints/round=3`):
    file name -> content hash. A folder pruned on purpose (`train.keep_checkpoints`) is absent."""
    read_from: list[InputRef] = field(default_factory=list)
    """What the cache key hashed from upstream stage runs when this one ran (`pipeline.runner.read_sources`):
    a stage is stale once one of them changed or is gone (`storage.staleness`). Empty in a manifest written
    before it was recorded, or copied by `fork`: such a stage is never called stale."""
    config_fields: list[str] = field(default_factory=list)
    """The config fields the stage declares (dotted paths), and `config_hash`: their values in the run's
    config as written (`config.yaml`) when it ran; a different hash of today's saved config is stale too."""
    config_hash: str = ""

    def write(self, path: Path) -> None:
        write_text_atomic(json.dumps(asdict(self), indent=2, sort_keys=True), path)

    @classmethod
    def read(cls, path: Path) -> Manifest | None:
        """The manifest at `path`, or None if absent or unreadable (a stage killed mid-write) or of other
        fields (another version). JSON of another shape (a list, `artifacts` a string, ...) is an
        `ArtifactError`: one line naming the file."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            return None
        problem = _shape_problem(data)
        if problem:
            raise ArtifactError(f"{path} is not a stage manifest ({problem}); delete it and the stage runs again")
        try:
            data["artifacts"] = {k: ArtifactRef(**v) for k, v in data.get("artifacts", {}).items()}
            data["files"] = {d: {n: FileRef(**r) for n, r in refs.items()} for d, refs in data.get("files", {}).items()}
            data["read_from"] = [InputRef(**ref) for ref in data.get("read_from", [])]
            return cls(**data)
        except TypeError:
            return None

    def artifact_sha(self, artifact: str, stage: str) -> str:
        """The sha256 of one artifact file of this stage run (what a downstream cache key hashes)."""
        if artifact not in self.artifacts:
            raise ArtifactError(f"stage '{stage}' of round {self.round} in run '{self.run}' wrote no "
                                f"'{artifact}' artifact")
        return self.artifacts[artifact].sha256

    def finish(self) -> Manifest:
        self.seconds = round(time.time() - self.started_at, 3)
        return self


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "stage": str, "run": str, "round": int, "key": str, "code_version": int, "artifacts": dict,
    "outputs": dict, "started_at": (int, float), "seconds": (int, float), "files": dict, "read_from": list,
    "config_fields": list, "config_hash": str,
}  # fmt: skip
_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}  # fmt: skip


def _shape_problem(data: Any) -> str | None:
    """What makes decoded JSON something other than a manifest's shape, or None."""
    if not isinstance(data, dict):
        return f"{_JSON_NAMES.get(type(data), type(data).__name__)}, not an object"
    for name, kind in _FIELD_TYPES.items():
        value = data.get(name)
        if name in data and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"`{name}` is {_JSON_NAMES.get(type(value), type(value).__name__)}"
    entries = [(f"artifacts.{k}", v) for k, v in data.get("artifacts", {}).items()]
    entries += [(f"read_from[{i}]", v) for i, v in enumerate(data.get("read_from", []))]
    for folder, refs in data.get("files", {}).items():
        entries += [(f"files.{folder}", refs)]
        entries += [(f"files.{folder}.{k}", v) for k, v in refs.items()] if isinstance(refs, dict) else []
    for name, value in entries:
        if not isinstance(value, dict):
            return f"`{name}` is {_JSON_NAMES.get(type(value), type(value).__name__)}, not an object"
    return None
