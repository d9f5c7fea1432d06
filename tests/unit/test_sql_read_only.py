"""`coevolve sql` and the web view read, never write (issue 38, item 6): SELECT statements only, files
under the storage root only, no ATTACH, no configuration changes. DuckDB's own settings do the file
rules (`allowed_directories`, `enable_external_access = false`, `lock_configuration = true`)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.storage.catalog import connect, query
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore
from coevolve.ui.reader import RunsReader

EVAL = {"split": "test", "task_id": "t", "family": "f", "trajectory_id": "x", "policy_version": "p",
        "greedy": True, "reward": 0.0, "success": False}  # fmt: skip


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "runs"
    RunStore(RunLayout(root, "a")).write(0, "evaluate", "evals", [EVAL, EVAL])
    (tmp_path / "secret.csv").write_text("key,value\npassword,hunter2\n")
    return root


def sql(root: Path, statement: str):
    return CliRunner().invoke(app, ["sql", statement, "--root", str(root), "--format", "csv"])


def test_selects_still_run(root):
    assert query(root, "SELECT count(*) AS n FROM evals").to_pylist() == [{"n": 2}]
    for statement in ("DESCRIBE evals", "SUMMARIZE evals", "SHOW TABLES", "WITH e AS (FROM evals) SELECT * FROM e",
                      "SELECT * FROM read_parquet('run=a/round=0/stage=evaluate/evals.parquet')".replace(
                          "run=a", str(root.resolve() / "run=a"))):  # fmt: skip
        assert query(root, statement).num_rows > 0, statement
    result = sql(root, "SELECT success FROM evals")
    assert result.exit_code == 0 and result.stdout.splitlines()[1:] == ["false", "false"]


def test_copy_to_writes_nowhere_not_even_over_an_artifact(root, tmp_path):
    artifact = root / "run=a" / "round=0" / "stage=evaluate" / "evals.parquet"
    before = artifact.read_bytes()
    forged = f"COPY (SELECT * REPLACE (true AS success) FROM evals) TO '{artifact}' (FORMAT parquet)"
    for statement in (forged, f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'",
                      f"COPY (SELECT 1) TO '{root / 'inside.csv'}'"):  # fmt: skip
        result = sql(root, statement)
        assert result.exit_code != 0 and "read-only" in result.output, statement
        with pytest.raises(duckdb.Error):
            query(root, statement)
    assert artifact.read_bytes() == before
    assert not (tmp_path / "out.csv").exists() and not (root / "inside.csv").exists()


def test_no_file_outside_the_root_is_read(root, tmp_path):
    secret = tmp_path / "secret.csv"
    for statement in (f"SELECT * FROM read_csv('{secret}')", f"SELECT * FROM read_text('{secret}')",
                      f"SELECT * FROM read_text('{root}/../secret.csv')", "SELECT * FROM glob('/*')"):  # fmt: skip
        result = sql(root, statement)
        assert result.exit_code != 0 and "hunter2" not in result.output, statement
        with pytest.raises(duckdb.PermissionException):
            query(root, statement)


def test_no_attach_no_settings_no_catalog_changes(root, tmp_path):
    for statement in (f"ATTACH '{tmp_path / 'new.duckdb'}' AS new", "ATTACH ':memory:' AS m",
                      "SET enable_external_access = true", "RESET allowed_directories", "SET threads = 1",
                      "CREATE TABLE t AS SELECT 1", "SELECT 1; CREATE VIEW v AS SELECT 1", "INSTALL httpfs"):  # fmt: skip
        result = sql(root, statement)
        assert result.exit_code != 0 and "read-only" in result.output, statement
    assert not (tmp_path / "new.duckdb").exists()


def test_the_connection_itself_is_locked(root, tmp_path):
    """What `connect` hands to the web view and notebooks: its settings cannot be loosened by any query."""
    con = connect(root)
    try:
        for statement in ("SET enable_external_access = true", "RESET allowed_directories",
                          "SET allowed_directories = ['/']", "SET lock_configuration = false"):  # fmt: skip
            with pytest.raises(duckdb.InvalidInputException, match="locked"):
                con.execute(statement)
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"ATTACH '{tmp_path / 'new.duckdb'}' AS new")
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
        assert con.execute("SELECT count(*) FROM evals").fetchone() == (2,)
    finally:
        con.close()
    assert not (tmp_path / "new.duckdb").exists() and not (tmp_path / "out.csv").exists()


def test_the_web_view_reads_nothing_outside_the_root(root, tmp_path):
    reader = RunsReader(root)
    assert reader.one("SELECT count(*) AS n FROM evals") == {"n": 2}
    with pytest.raises(duckdb.PermissionException):
        reader.rows("SELECT * FROM read_csv(?)", [str(tmp_path / "secret.csv")])
    with pytest.raises(duckdb.PermissionException):
        reader.rows(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    assert not (tmp_path / "out.csv").exists()
    empty = RunsReader(tmp_path / "no-such-root")  # no root yet: still a locked connection
    with pytest.raises(duckdb.PermissionException):
        empty.rows("SELECT * FROM read_csv(?)", [str(tmp_path / "secret.csv")])


def test_a_run_linked_into_the_root_is_read_and_the_place_it_leads_to_no_further(tmp_path, root):
    """A view's root may hold a run that is a link to another folder (the web view over a shared run):
    its files are read where the link leads, and nothing else there is."""
    elsewhere = tmp_path / "elsewhere"
    RunStore(RunLayout(elsewhere, "b")).write(0, "evaluate", "evals", [EVAL])
    (elsewhere / "other.csv").write_text("key,value\nx,1\n")
    (root / "run=b").symlink_to(elsewhere / "run=b")
    runs = connect(root).execute("SELECT run, count(*) FROM evals GROUP BY run ORDER BY run").fetchall()
    assert runs == [("a", 2), ("b", 1)]
    with pytest.raises(duckdb.Error):
        connect(root).execute(f"SELECT * FROM read_csv('{elsewhere / 'other.csv'}')").fetchall()
