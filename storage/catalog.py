"""DuckDB catalog: one view per artifact over the Parquet files of every run.

Parquet is the source of truth. `build_catalog(root)` (re)writes `root/catalog.duckdb` with views such as

    CREATE VIEW trajectories AS SELECT * FROM read_parquet('<root>/run=*/round=*/stage=*/trajectories.parquet',
        hive_partitioning = true, union_by_name = true)

so `run`, `round` and `stage` come out as columns and new files are seen without rebuilding. Queries
open the catalog read-only; `query(root, sql)` works even where the catalog file cannot be written
(another process holds it) by building the same views in memory.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from storage.schemas import ARTIFACTS

CATALOG = "catalog.duckdb"


def artifact_glob(root: Path, artifact: str) -> str:
    return str(root.resolve() / "run=*" / "round=*" / "stage=*" / f"{artifact}.parquet")


def present_artifacts(root: Path) -> list[str]:
    """Artifacts that have at least one file under `root` (a view over an empty glob would fail)."""
    return [name for name in ARTIFACTS if any(root.glob(f"run=*/round=*/stage=*/{name}.parquet"))]


def _create_views(con: duckdb.DuckDBPyConnection, root: Path) -> list[str]:
    names = present_artifacts(root)
    for name in names:
        glob = artifact_glob(root, name).replace("'", "''")
        con.execute(
            f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{glob}', "
            "hive_partitioning = true, union_by_name = true)"
        )
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
