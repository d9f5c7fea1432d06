"""Atomic Parquet writes, schema-checked reads, and the content hashes of the files a run writes.

A file is written under a temporary name in the same folder, fsynced, then renamed over its final name,
so a reader (or DuckDB's glob) never sees half a file; a write that fails (a full or read-only disk)
removes its temporary file, a full disk or file-size limit being one paragraph naming the file and its size,
and a symlink planted in the run's folder is refused, never written through (`coevolve.run_files`). Every data page carries a CRC32 checksum, verified when read, so a flipped bit
is an error, never a changed value (files of older versions carry none and read as before). Reads check the schema version stored in the file's metadata and name the file and the
stage that rebuilds it when something is wrong.

`file_matches` checks a file against its recorded sha256 through `coevolve.file_hashes`, which reads a file
at most once per process while it is unchanged; `changed_in_folder` checks a checkpoint folder's recorded
files, those deleted on purpose since (a dropped optimizer state) aside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coevolve.file_hashes import dropped_on_purpose, file_sha256
from coevolve.run_files import ArtifactError, atomic_file, write_text_atomic
from coevolve.storage.schemas import schema_version

__all__ = ["ArtifactError", "changed_in_folder", "file_matches", "read_table", "to_table", "write_table", "write_text_atomic"]


def to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) to a table with exactly `schema`; a missing or mistyped column fails loudly."""
    unknown = {key for row in rows for key in row} - set(schema.names)
    if unknown:
        raise ValueError(f"columns not in schema: {sorted(unknown)}")
    return pa.Table.from_pylist(rows, schema=schema)


def write_table(table: pa.Table, path: Path) -> str:
    """Write `table` atomically to `path`; returns the file's sha256."""
    with atomic_file(path, needed=table.nbytes) as handle:
        pq.write_table(table, handle, compression="zstd", write_page_checksum=True)
    return file_sha256(path)


def read_table(path: Path, schema: pa.Schema, *, rebuild_hint: str) -> pa.Table:
    """Read a Parquet artifact, checking it exists, parses and has `schema`'s version and columns."""
    if not path.exists():
        raise ArtifactError(f"missing artifact {path}. {rebuild_hint}")
    try:
        table = pq.read_table(path, page_checksum_verification=True)
        found, names = schema_version(table.schema), table.schema.names
    except (pa.ArrowException, OSError, ValueError) as exc:  # ValueError: a damaged footer's text
        raise ArtifactError(f"corrupt artifact {path} ({exc}). {rebuild_hint}") from exc
    wanted = schema_version(schema)
    if found != wanted:
        raise ArtifactError(f"{path} has schema version {found}, this code reads {wanted}. {rebuild_hint}")
    missing = set(schema.names) - set(names)
    if missing:
        raise ArtifactError(f"{path} lacks columns {sorted(missing)}. {rebuild_hint}")
    return table.select(schema.names).cast(schema)


def file_matches(path: Path, sha256: str, size: int = -1) -> bool:
    """Whether `path` holds exactly the content it was recorded with: its sha256 (`file_sha256`, read at
    most once per process); a different size is decided without reading it. An unchanged size and
    modification time prove nothing (an edit can put the old time back)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    if size >= 0 and stat.st_size != size:
        return False
    try:
        return file_sha256(path) == sha256
    except OSError:
        return False


def changed_in_folder(directory: Path, refs: dict[str, Any]) -> list[str]:
    """The files of `directory` a manifest recorded (name -> `FileRef`) that no longer hold their recorded
    content (`file_matches`), those deleted on purpose since aside (`file_hashes.dropped_on_purpose`)."""
    return [name for name, ref in refs.items()
            if not file_matches(directory / name, ref.sha256, ref.size) and not dropped_on_purpose(directory / name)]
