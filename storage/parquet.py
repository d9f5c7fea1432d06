"""Atomic Parquet writes and schema-checked reads.

A file is written under a temporary name in the same folder, fsynced, then renamed over its final name,
so a reader (or DuckDB's glob) never sees half a file. Reads check the schema version stored in the
file's metadata and name the file and the stage that rebuilds it when something is wrong.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coevolve.storage.schemas import schema_version


class ArtifactError(RuntimeError):
    """A missing, corrupt or incompatible artifact; the message says how to rebuild it."""


def to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) to a table with exactly `schema`; a missing or mistyped column fails loudly."""
    unknown = {key for row in rows for key in row} - set(schema.names)
    if unknown:
        raise ValueError(f"columns not in schema: {sorted(unknown)}")
    return pa.Table.from_pylist(rows, schema=schema)


def write_table(table: pa.Table, path: Path) -> str:
    """Write `table` atomically to `path`; returns the file's sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return file_sha256(path)


def write_text_atomic(text: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_table(path: Path, schema: pa.Schema, *, rebuild_hint: str) -> pa.Table:
    """Read a Parquet artifact, checking it exists, parses and has `schema`'s version and columns."""
    if not path.exists():
        raise ArtifactError(f"missing artifact {path}. {rebuild_hint}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise ArtifactError(f"corrupt artifact {path} ({exc}). {rebuild_hint}") from exc
    found, wanted = schema_version(table.schema), schema_version(schema)
    if found != wanted:
        raise ArtifactError(f"{path} has schema version {found}, this code reads {wanted}. {rebuild_hint}")
    missing = set(schema.names) - set(table.schema.names)
    if missing:
        raise ArtifactError(f"{path} lacks columns {sorted(missing)}. {rebuild_hint}")
    return table.select(schema.names).cast(schema)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_matches(path: Path, sha256: str, size: int = -1, mtime_ns: int = -1) -> bool:
    """Whether `path` still holds the content it was recorded with: an unchanged size and modification
    time are trusted, anything else is decided by its sha256."""
    try:
        stat = path.stat()
    except OSError:
        return False
    if size >= 0 and stat.st_size == size and stat.st_mtime_ns == mtime_ns:
        return True
    return file_sha256(path) == sha256
