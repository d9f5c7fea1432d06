"""DuckDB catalog: one view per artifact over the Parquet files of every run.

Parquet is the source of truth. `build_catalog(root)` (re)writes `root/catalog.duckdb` with views such as

    CREATE VIEW trajectories AS SELECT * FROM read_parquet(
        <catalog folder> || '/run=*/round=*/stage=*/trajectories.parquet',
        hive_partitioning = true, union_by_name = true)

so `run`, `round` and `stage` come out as columns and new files are seen without rebuilding. DuckDB resolves
a relative path against the working directory, never against the database file, so the views compute the
catalog's folder when queried: `coalesce(getvariable('coevolve_runs'), parse_dirpath(current_setting(
'temp_directory')))`, DuckDB's documented default temp directory being `<database file>.tmp`. The file
opens from any directory with any client, and after the folder is moved or copied to another machine; a
client that sets its own `temp_directory`, or ATTACHes the catalog to another database, first runs
`SET VARIABLE coevolve_runs = '<the runs folder>'`. The catalog is written under a temporary name and
renamed, so a reader never sees half of one and a corrupt one is simply replaced (`repair_catalog`).

The project's own queries (`query(root, sql)`, `coevolve sql`, the web view) build the same views in
memory with absolute paths, never lock the catalog file, and are read-only (`connect`, `query`).

A corrupt or half-written file (its Parquet footer does not parse) would make every query on its view
fail. Such files are left out: that view lists the readable files explicitly instead of a glob, and
`ArtifactFiles.unreadable` names the skipped ones (`coevolve sql` prints them with the rebuild command).

A file that parses but is not what its stage wrote (a flipped bit, an edit with its mtime put back) would
be read as data. `ArtifactFiles.changed` checks the files of the views a query reads against their
manifests' sha256 (`parquet.file_matches`, the check `coevolve run` makes before trusting a stage; each
file hashed at most once per process), and `coevolve sql` refuses the query naming the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from coevolve.run_files import DiskFullError, disk_full
from coevolve.storage.layout import MANIFEST
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import file_matches
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.staleness import stage_table

CATALOG = "catalog.duckdb"

CATALOG_FOLDER = "coalesce(getvariable('coevolve_runs'), parse_dirpath(current_setting('temp_directory')))"
"""SQL for the persisted catalog's folder, evaluated by whoever queries a view (see the module docstring)."""


EVALUATIONS_FOLDER = "evaluations"
"""Where `coevolve eval` writes (`flows/reevaluate.py`), beside the runs and never into one (one writer per
run), in the same `run=/round=/stage=` layout; the `evaluations` view reads it."""


def relative_glob(artifact: str) -> str:
    """The glob of an artifact's files relative to the root: every run's stage folders (`evaluations`: those
    under `EVALUATIONS_FOLDER`)."""
    relative = Path("run=*") / "round=*" / "stage=*" / f"{artifact}.parquet"
    return str(EVALUATIONS_FOLDER / relative if artifact == "evaluations" else relative)


def artifact_glob(root: Path | None, artifact: str) -> str:
    """The glob of an artifact's files under `root` (absolute), or relative to the root when None."""
    return relative_glob(artifact) if root is None else str(root.resolve() / relative_glob(artifact))


def unreadable_reason(path: Path) -> str | None:
    """Why `path` does not read as Parquet, to follow its name in a sentence: the operating system's
    refusal ("cannot be opened (Permission denied)") or a footer that does not parse ("is not readable
    Parquet": corrupt or half-written); None when it reads."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"cannot be opened ({exc.strerror or type(exc).__name__})"
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError):
        return "is not readable Parquet"
    return None


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
            for path in sorted(root.resolve().glob(relative_glob(name))):
                found = readable.setdefault(name, []) if unreadable_reason(path) is None else unreadable
                found.append(path)
        return cls(readable, unreadable)

    def complete(self, name: str) -> bool:
        """No file of `name` was left out (its view can use the glob and see new files)."""
        return all(path.name != f"{name}.parquet" for path in self.unreadable)

    def changed(self, names: Iterable[str]) -> list[Path]:
        """The readable files of the views `names` whose content is not what their stage's manifest records
        (sha256); a file no manifest lists (a stage still writing) is not checked. A manifest of the wrong
        shape is an `ArtifactError` naming it."""
        manifests: dict[Path, Manifest | None] = {}
        changed = []
        for name in names:
            for path in self.readable.get(name, []):
                if path.parent not in manifests:
                    manifests[path.parent] = Manifest.read(path.parent / MANIFEST)
                ref = manifest.artifacts.get(name) if (manifest := manifests[path.parent]) else None
                if ref is not None and not file_matches(path, ref.sha256, ref.size):
                    changed.append(path)
        return changed


_INDIRECT = re.compile(r"query_table|read_parquet|parquet_scan|\.parquet|glob", re.IGNORECASE)
"""What in a query may read artifact files without naming their view."""


def views_read(sql: str, views: Iterable[str]) -> list[str]:
    """The views among `views` that `sql` may read: those it names (a name in a string or comment counts
    too: checking one more view costs a hash, never a wrong answer), or all of them when it reads files by
    path or a table by a computed name."""
    views = list(views)
    if _INDIRECT.search(sql):
        return views
    words = {word.lower() for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}
    return [view for view in views if view in words]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _in_folder(relative: Path | str) -> str:
    """SQL for a path under the persisted catalog's folder."""
    return f"{CATALOG_FOLDER} || {_quote(f'/{relative}')}"


def _create_views(
    con: duckdb.DuckDBPyConnection, root: Path, files: ArtifactFiles | None = None, *, relative: bool = False
) -> list[str]:
    """One view per artifact; `relative`: paths under `CATALOG_FOLDER` (the persisted, portable catalog)."""
    files = files or ArtifactFiles.scan(root)
    for name, readable in files.readable.items():
        if relative:
            shown = [_in_folder(path.relative_to(root.resolve())) for path in readable]
            glob = _in_folder(artifact_glob(None, name))
        else:
            shown, glob = [_quote(str(path)) for path in readable], _quote(artifact_glob(root, name))
        source = glob if files.complete(name) else "[" + ", ".join(shown) + "]"
        con.execute(
            f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({source}, "
            "hive_partitioning = true, union_by_name = true)"
        )
    return list(files.readable)


def build_catalog(root: Path) -> Path:
    """(Re)write `root/catalog.duckdb`; returns its path. Built under a temporary name and renamed over the
    old file, so a reader never opens half a catalog, one holding the old file does not block the rewrite,
    and a corrupt file is replaced rather than opened. A full disk or a file-size limit is a `DiskFullError`
    naming the catalog (`run_files.disk_full`: one paragraph, the old catalog left as it was)."""
    root.mkdir(parents=True, exist_ok=True)
    path, scratch = root / CATALOG, root / f".{CATALOG}.{os.getpid()}.tmp"
    scratch.unlink(missing_ok=True)
    try:
        with duckdb.connect(str(scratch)) as con:  # its temp_directory is `scratch.tmp`: the same folder
            _create_views(con, root, relative=True)
        # an old file's write-ahead log would be replayed onto the new one
        path.with_name(CATALOG + ".wal").unlink(missing_ok=True)
        os.replace(scratch, path)
    except (duckdb.Error, OSError) as exc:
        full = disk_full(exc, path)
        if full is None:
            raise
        raise full from None
    finally:
        scratch.unlink(missing_ok=True)
    return path


def catalog_problem(root: Path) -> str | None:
    """Why `root/catalog.duckdb` needs rebuilding: not a DuckDB database, or views from before they found
    their folder (paths relative to the working directory). None when absent, sound, or held by a writer."""
    path = root / CATALOG
    if not path.exists():
        return None
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            views = con.execute("SELECT sql FROM duckdb_views() WHERE NOT internal").fetchall()
    except duckdb.Error as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None if "lock" in text.lower() else f"it does not open ({text})"
    if any("temp_directory" not in sql for (sql,) in views):
        return "its views read paths relative to the working directory"
    return None


def repair_catalog(root: Path) -> str | None:
    """Rebuild a corrupt or outdated `root/catalog.duckdb`; returns the one-line warning to show, if any."""
    problem = catalog_problem(root)
    if problem is None:
        return None
    try:
        build_catalog(root)
    except (duckdb.Error, OSError, DiskFullError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"warning: {root / CATALOG} is unusable: {problem}; rebuilding it failed: {reason}"
    return f"warning: {root / CATALOG} was rebuilt: {problem}"


def _lock_down(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """DuckDB's own guards ("Securing DuckDB"): files are read under `root` only (no read_csv('/etc/..'),
    no COPY TO or ATTACH elsewhere, no extension loading or Python replacement scans), then the settings
    are frozen so no SET or RESET gives any of it back. A run folder that is a link to another place (a
    run shared into a view's root) is allowed where it leads: DuckDB checks the resolved path."""
    places = sorted({root.resolve(), *(run.resolve() for run in root.glob("run=*") if run.is_dir())})
    allowed = ", ".join(_quote(str(place).rstrip("/") + "/") for place in places)
    con.execute(f"SET allowed_directories = [{allowed}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def connect(root: Path, files: ArtifactFiles | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with every artifact view defined (never locks the catalog file) that reads
    files under `root` only and cannot change its settings; `files`: a scan of `root` already made. Its
    `stages` table holds one row per stage run with its `stale` column (`staleness.stage_table`), made from
    the manifests when the connection opens (the persisted catalog, a file other clients keep, has none: a
    stage re-run would leave it saying something no longer true)."""
    con = duckdb.connect()
    try:
        _create_views(con, root, files)
        con.from_arrow(stage_table(root)).create("stages")  # computed now: true of the manifests as they are
        _lock_down(con, root)
    except BaseException:
        con.close()
        raise
    return con


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Only SELECT statements (DESCRIBE, SHOW, SUMMARIZE, WITH and VALUES parse as one): the file rules of
    `connect` still let COPY ... TO write under the root, e.g. over an artifact, and CREATE or ATTACH
    ':memory:' change the in-memory catalog."""
    kinds = {_statement_kind(statement) for statement in con.extract_statements(sql)}
    if kinds - {"SELECT"}:
        raise duckdb.PermissionException(
            f"read-only: only SELECT statements run over the views, not {', '.join(sorted(kinds - {'SELECT'}))}"
        )


def _statement_kind(statement: duckdb.Statement) -> str:
    """The statement's type as the user wrote it: DuckDB files INSTALL (and FORCE INSTALL) under LOAD."""
    kind = statement.type.name
    if kind == "LOAD" and "INSTALL" in statement.query.upper().split()[:2]:
        return "INSTALL"
    return kind


def query(root: Path, sql: str, files: ArtifactFiles | None = None) -> pa.Table:
    """Run the SELECT statements `sql` against the views of every artifact under `root` (read-only)."""
    con = connect(root, files)
    try:
        check_read_only(con, sql)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
