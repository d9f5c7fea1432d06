"""DuckDB catalog: one view per artifact over the Parquet files of every run.

Parquet is the source of truth. `build_catalog(root)` (re)writes `root/catalog.duckdb` with views such as

    CREATE VIEW trajectories AS SELECT * FROM read_parquet('<root>/run=*/round=*/stage=*/trajectories.parquet',
        hive_partitioning = true, union_by_name = true)

so `run`, `round` and `stage` come out as columns and new files are seen without rebuilding. Queries
open the catalog read-only; `query(root, sql)` works even where the catalog file cannot be written
(another process holds it) by building the same views in memory.

A corrupt or half-written file (its Parquet footer does not parse) would make every query on its view
fail. Such files are left out: that view lists the readable files explicitly instead of a glob, and
`unreadable_files(root)` names the skipped ones (`coevolve sql` prints them with the rebuild command).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from storage.schemas import ARTIFACTS

CATALOG = "catalog.duckdb"


def artifact_glob(root: Path, artifact: str) -> str:
    return str(root.resolve() / "run=*" / "round=*" / "stage=*" / f"{artifact}.parquet")


def present_artifacts(root: Path) -> list[str]:
    """Artifacts that have at least one file under `root` (a view over an empty glob would fail)."""
    return [name for name in ARTIFACTS if any(root.glob(f"run=*/round=*/stage=*/{name}.parquet"))]


def _readable(path: Path) -> bool:
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError):
        return False
    return True


def _files(root: Path, artifact: str) -> list[Path]:
    return sorted(root.resolve().glob(f"run=*/round=*/stage=*/{artifact}.parquet"))


def readable_artifacts(root: Path) -> list[str]:
    """Artifacts with at least one readable file under `root`: the views `coevolve sql` defines."""
    return [name for name in ARTIFACTS if any(_readable(path) for path in _files(root, name))]


def unreadable_files(root: Path) -> list[Path]:
    """Artifact files under `root` whose Parquet footer does not parse (left out of the views)."""
    return [path for name in ARTIFACTS for path in _files(root, name) if not _readable(path)]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _create_views(con: duckdb.DuckDBPyConnection, root: Path) -> list[str]:
    names = []
    for name in ARTIFACTS:
        files = _files(root, name)
        readable = [path for path in files if _readable(path)]
        if not readable:
            continue
        source = _quote(artifact_glob(root, name)) if len(readable) == len(files) else (
            "[" + ", ".join(_quote(str(path)) for path in readable) + "]"
        )  # fmt: skip
        con.execute(
            f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({source}, "
            "hive_partitioning = true, union_by_name = true)"
        )
        names.append(name)
    return names


def build_catalog(root: Path) -> Path | None:
    """(Re)write `root/catalog.duckdb`; returns its path, or None if another process holds the file."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / CATALOG
    try:
        con = duckdb.connect(str(path))
    except duckdb.IOException:
        return None
    try:
        _create_views(con, root)
    finally:
        con.close()
    return path


def connect(root: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with every artifact view defined (never locks the catalog file)."""
    con = duckdb.connect()
    _create_views(con, root)
    return con


def query(root: Path, sql: str) -> pa.Table:
    """Run `sql` against the views of every artifact under `root`."""
    con = connect(root)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
