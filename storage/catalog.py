"""DuckDB catalog: one view per artifact over the Parquet files of every run.

Parquet is the source of truth. `build_catalog(root)` (re)writes `root/catalog.duckdb` with views such as

    CREATE VIEW trajectories AS SELECT * FROM read_parquet('run=*/round=*/stage=*/trajectories.parquet',
        hive_partitioning = true, union_by_name = true)

so `run`, `round` and `stage` come out as columns and new files are seen without rebuilding. The paths
are relative to the storage root, so the folder can be moved or copied to another machine: open the
catalog from inside it (`cd runs && duckdb catalog.duckdb`), or from anywhere after
`SET file_search_path = '<the runs folder>'`. The project's own queries (`query(root, sql)`, `coevolve
sql`) build the same views in memory with absolute paths and never lock the catalog file.

A corrupt or half-written file (its Parquet footer does not parse) would make every query on its view
fail. Such files are left out: that view lists the readable files explicitly instead of a glob, and
`ArtifactFiles.unreadable` names the skipped ones (`coevolve sql` prints them with the rebuild command).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from coevolve.storage.schemas import ARTIFACTS

CATALOG = "catalog.duckdb"


def artifact_glob(root: Path | None, artifact: str) -> str:
    """The glob of an artifact's files under `root` (absolute), or relative to the root when None."""
    relative = Path("run=*") / "round=*" / "stage=*" / f"{artifact}.parquet"
    return str(relative if root is None else root.resolve() / relative)


def present_artifacts(root: Path) -> list[str]:
    """Artifacts that have at least one file under `root` (a view over an empty glob would fail)."""
    return [name for name in ARTIFACTS if any(root.glob(f"run=*/round=*/stage=*/{name}.parquet"))]


def _readable(path: Path) -> bool:
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError):
        return False
    return True


@dataclass(frozen=True)
class ArtifactFiles:
    """The artifact files under a root, split by whether their Parquet footer parses (read once)."""

    readable: dict[str, list[Path]]
    """Artifact name -> its readable files, for artifacts with at least one."""
    unreadable: list[Path]
    """Files left out of the views."""

    @classmethod
    def scan(cls, root: Path) -> ArtifactFiles:
        readable, unreadable = {}, []
        for name in ARTIFACTS:
            for path in sorted(root.resolve().glob(f"run=*/round=*/stage=*/{name}.parquet")):
                (readable.setdefault(name, []) if _readable(path) else unreadable).append(path)
        return cls(readable, unreadable)

    def complete(self, name: str) -> bool:
        """No file of `name` was left out (its view can use the glob and see new files)."""
        return all(path.name != f"{name}.parquet" for path in self.unreadable)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _create_views(
    con: duckdb.DuckDBPyConnection, root: Path, files: ArtifactFiles | None = None, *, relative: bool = False
) -> list[str]:
    """One view per artifact; `relative`: paths relative to `root` (the persisted, portable catalog)."""
    files = files or ArtifactFiles.scan(root)
    for name, readable in files.readable.items():
        shown = [path.relative_to(root.resolve()) if relative else path for path in readable]
        source = _quote(artifact_glob(None if relative else root, name)) if files.complete(name) else (
            "[" + ", ".join(_quote(str(path)) for path in shown) + "]"
        )  # fmt: skip
        con.execute(
            f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({source}, "
            "hive_partitioning = true, union_by_name = true)"
        )
    return list(files.readable)


def build_catalog(root: Path) -> Path | None:
    """(Re)write `root/catalog.duckdb`; returns its path, or None if another process holds the file."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / CATALOG
    try:
        con = duckdb.connect(str(path))
    except duckdb.IOException:
        return None
    try:
        con.execute(f"SET file_search_path = {_quote(str(root.resolve()))}")  # views are bound when created
        _create_views(con, root, relative=True)
    finally:
        con.close()
    return path


def connect(root: Path, files: ArtifactFiles | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with every artifact view defined (never locks the catalog file);
    `files`: a scan of `root` already made (else it is scanned)."""
    con = duckdb.connect()
    _create_views(con, root, files)
    return con


def query(root: Path, sql: str, files: ArtifactFiles | None = None) -> pa.Table:
    """Run `sql` against the views of every artifact under `root`."""
    con = connect(root, files)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
