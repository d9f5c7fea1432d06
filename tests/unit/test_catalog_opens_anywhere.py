"""`runs/catalog.duckdb` opens from any directory with any DuckDB client, also after the runs folder is
moved, and a corrupt or outdated one is rebuilt with a one-line warning (issue 38, item 7)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.storage.catalog import CATALOG, build_catalog, catalog_problem
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore

ROW = {"dataset_version": 1, "task_id": "t", "weight": 1.0, "added_round": 1}
SQL = "SELECT run, round, stage, task_id FROM datasets ORDER BY round"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project folder holding `runs/` with a built catalog; the working directory is the project."""
    store = RunStore(RunLayout(tmp_path / "runs", "demo"))
    for r in (0, 1):
        store.write(r, "merge", "datasets", [ROW])
    build_catalog(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rows(catalog: Path | str) -> list[tuple]:
    with duckdb.connect(str(catalog), read_only=True) as con:
        return con.sql(SQL).fetchall()


EXPECTED = [("demo", 0, "merge", "t"), ("demo", 1, "merge", "t")]


def test_opens_from_the_project_root_and_from_anywhere(project, monkeypatch):
    assert rows("runs/catalog.duckdb") == EXPECTED  # docs/sql.md: `duckdb -readonly runs/catalog.duckdb`
    monkeypatch.chdir(project / "runs")
    assert rows("catalog.duckdb") == EXPECTED
    monkeypatch.chdir("/")
    assert rows(project / "runs" / CATALOG) == EXPECTED


def test_opens_after_the_runs_folder_is_moved(project, monkeypatch):
    moved = project / "elsewhere" / "copy"
    shutil.move(project / "runs", moved)
    monkeypatch.chdir(project)
    assert rows(moved / CATALOG) == EXPECTED
    assert rows("elsewhere/copy/catalog.duckdb") == EXPECTED


def test_a_view_that_lists_its_files_also_moves(project):
    """A corrupt file makes its view list the readable files instead of a glob."""
    store = RunStore(RunLayout(project / "runs", "demo"))
    store.write(2, "merge", "datasets", [ROW])
    broken = store.layout.artifact_path(2, "merge", "datasets")
    broken.write_bytes(broken.read_bytes()[:40])
    build_catalog(project / "runs")
    shutil.move(project / "runs", project / "moved")
    assert rows("moved/catalog.duckdb") == EXPECTED


def test_attached_to_another_database_it_is_told_its_folder(project):
    with duckdb.connect() as con:
        con.execute("ATTACH 'runs/catalog.duckdb' AS runs (READ_ONLY)")
        con.execute(f"SET VARIABLE coevolve_runs = '{project / 'runs'}'")
        assert con.sql(SQL.replace("FROM datasets", "FROM runs.datasets")).fetchall() == EXPECTED


def test_a_garbage_catalog_is_rebuilt_with_one_warning_line(project):
    catalog = project / "runs" / CATALOG
    catalog.write_bytes(b"not a database" * 100)
    assert "does not open" in catalog_problem(project / "runs")
    result = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM datasets", "--root", "runs"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "catalog.duckdb was rebuilt" in warnings[0], result.stderr
    assert rows(catalog) == EXPECTED and catalog_problem(project / "runs") is None


def test_a_catalog_with_working_directory_paths_is_rebuilt(project):
    """Catalogs written before the views found their own folder."""
    catalog = project / "runs" / CATALOG
    with duckdb.connect(str(catalog)) as con:  # as the old build_catalog wrote it
        con.execute(f"SET file_search_path = '{project / 'runs'}'")
        con.execute("CREATE OR REPLACE VIEW datasets AS SELECT * FROM read_parquet("
                    "'run=*/round=*/stage=*/datasets.parquet', hive_partitioning = true)")  # fmt: skip
    assert "working directory" in catalog_problem(project / "runs")
    result = CliRunner().invoke(app, ["sql", "SELECT 1 AS one", "--root", "runs"])
    assert result.exit_code == 0 and "was rebuilt" in result.stderr
    assert rows("runs/catalog.duckdb") == EXPECTED


def test_a_reader_holding_the_catalog_does_not_block_the_rebuild(project):
    with duckdb.connect("runs/catalog.duckdb", read_only=True) as held:
        RunStore(RunLayout(project / "runs", "second")).write(0, "merge", "datasets", [ROW])
        assert build_catalog(project / "runs") == project / "runs" / CATALOG
        assert held.execute("SELECT count(*) FROM datasets").fetchone() == (3,)  # the glob sees the new run
    assert not list((project / "runs").glob(f".{CATALOG}*"))  # no scratch file left behind
