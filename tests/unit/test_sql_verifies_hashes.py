"""`coevolve sql` and `coevolve compare` check the files they read against their manifests' sha256: a file
edited or with a flipped bit, its modification time put back, is named in one line with a non-zero exit,
never read as data or compared as equal. `sql` names the real cause of a refused file (the read-only rules,
not corruption) and the statement it refuses (INSTALL, not LOAD)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.store import RunStore


def _task(task_id: str) -> dict:
    row = {f.name: None for f in ARTIFACTS["tasks"] if f.name not in ("run", "round")}
    return {**row, "task_id": task_id, "env": "toolworld", "split": "train", "family": "f", "source": "seed",
            "turns": "[]", "initial_state": "{}", "solution": "[]", "checker": "{}", "lineage": "{}"}  # fmt: skip


def _run(root: Path, run: str = "demo", ids: tuple[str, ...] = ("IN-1", "IN-2")) -> RunLayout:
    """A run whose bootstrap stage wrote `tasks` with these ids, recorded in its manifest."""
    store = RunStore(RunLayout(root, run))
    ref = store.write(0, "bootstrap", "tasks", [_task(i) for i in ids])
    Manifest("bootstrap", run, 0, "k", 1, artifacts={"tasks": ref}).write(
        store.layout.manifest_path(0, "bootstrap")
    )
    return store.layout


def _replace_keeping_mtime(path: Path, content: bytes) -> None:
    stat = path.stat()
    path.write_bytes(content)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _edit(layout: RunLayout) -> Path:
    """tasks.parquet of round 0 rewritten as valid Parquet of other rows ("IN-1" reads "IN-t"), its
    modification time put back: a file only its hash tells from the one the stage wrote."""
    path = layout.artifact_path(0, "bootstrap", "tasks")
    scratch = RunStore(RunLayout(layout.root / "scratch", layout.run))
    scratch.write(0, "bootstrap", "tasks", [_task("IN-t"), _task("IN-2")])
    _replace_keeping_mtime(path, scratch.layout.artifact_path(0, "bootstrap", "tasks").read_bytes())
    shutil.rmtree(layout.root / "scratch")
    return path


def sql(root: Path, statement: str, *more: str):
    return CliRunner().invoke(app, ["sql", statement, "--root", str(root), *more], terminal_width=400)


def test_sql_refuses_an_edited_file_whose_mtime_was_put_back(tmp_path):
    layout = _run(tmp_path)
    assert "IN-1" in sql(tmp_path, "SELECT task_id FROM tasks").output
    path = _edit(layout)
    result = sql(tmp_path, "SELECT task_id FROM tasks ORDER BY task_id", "--format", "csv")
    assert result.exit_code != 0 and "IN-t" not in result.output, result.output
    assert f"{path} does not match its manifest" in " ".join(result.output.split())
    assert "coevolve stage bootstrap --run demo --round 0 --force" in result.output


def test_sql_refuses_a_flipped_bit(tmp_path):
    path = _run(tmp_path).artifact_path(0, "bootstrap", "tasks")
    content = bytearray(path.read_bytes())
    content[content.index(b"IN-1") + 3] ^= 0x01  # the footer's statistics hold the first id
    _replace_keeping_mtime(path, bytes(content))
    result = sql(tmp_path, "SELECT task_id, split FROM tasks")
    assert result.exit_code != 0 and "does not match its manifest" in result.output, result.output


def test_only_the_views_a_query_reads_are_checked(tmp_path):
    from coevolve.storage.catalog import views_read

    _edit(_run(tmp_path))
    assert sql(tmp_path, "SELECT 42 AS answer").exit_code == 0
    assert views_read("SELECT * FROM Tasks t JOIN steps USING (task_id)", ["tasks", "steps", "evals"]) == [
        "tasks",
        "steps",
    ]
    assert views_read("SELECT * FROM query_table('ta' || 'sks')", ["tasks", "steps"]) == ["tasks", "steps"]


def test_a_file_no_manifest_lists_is_not_refused(tmp_path):
    """A stage writes its files, then its manifest: a stage still writing is queried as before."""
    from coevolve.storage.catalog import ArtifactFiles

    layout = _run(tmp_path)
    layout.manifest_path(0, "bootstrap").unlink()
    assert ArtifactFiles.scan(tmp_path).changed(["tasks"]) == []
    assert "IN-1" in sql(tmp_path, "SELECT task_id FROM tasks").output


def test_compare_names_a_file_that_no_longer_matches_its_manifest(tmp_path):
    _run(tmp_path / "a")
    path = _edit(_run(tmp_path / "b"))
    result = CliRunner().invoke(app, ["compare", "demo", "demo", "--root", str(tmp_path / "a"),
                                      "--other-root", str(tmp_path / "b")], terminal_width=400)  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"{path} does not match its manifest" in result.output
    assert "1 file does not match its manifest" in result.output
    same = CliRunner().invoke(app, ["compare", "demo", "demo", "--root", str(tmp_path / "a")])
    assert same.exit_code == 0 and "0 differ" in same.output, same.output


def test_reading_another_roots_file_is_a_refusal_not_corruption(tmp_path):
    _run(tmp_path / "mine")
    theirs = _run(tmp_path / "theirs").artifact_path(0, "bootstrap", "tasks")
    result = sql(tmp_path / "mine", f"SELECT * FROM read_parquet('{theirs}')")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "refused" in text and "--root" in text, text
    assert "corrupt" not in text and "Rebuild" not in text


def test_a_corrupt_file_is_still_called_corrupt_with_its_rebuild_command(tmp_path):
    path = _run(tmp_path / "runs").artifact_path(0, "bootstrap", "tasks")
    path.write_bytes(path.read_bytes()[:40])  # half-written
    result = sql(tmp_path / "runs", f"SELECT * FROM read_parquet('{path}')")
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "corrupt or half-written" in text, text
    assert f"--force --root {tmp_path / 'runs'}" in text


def test_install_is_refused_by_its_name(tmp_path):
    for statement, kind in (
        ("INSTALL httpfs", "INSTALL"),
        ("FORCE INSTALL httpfs", "INSTALL"),
        ("LOAD httpfs", "LOAD"),
    ):
        result = sql(tmp_path, statement)
        assert (
            result.exit_code == 2
            and f"read-only: only SELECT statements run over the views, not {kind}"
            in (" ".join(result.output.split()))
        ), result.output
