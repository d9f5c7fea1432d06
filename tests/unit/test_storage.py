"""Storage: schemas round-trip, atomic writes, manifests and cache keys, errors that name the file."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coevolve.storage.catalog import build_catalog, query
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest, cache_key
from coevolve.storage.parquet import ArtifactError
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.store import RunStore


def _value(field: pa.Field, i: int):
    t = field.type
    if pa.types.is_list(t):
        return [i, i + 1] if not pa.types.is_floating(t.value_type) else [0.5, -1.25]
    if pa.types.is_string(t):
        return f"{field.name}-{i}"
    if pa.types.is_boolean(t):
        return i % 2 == 0
    if pa.types.is_floating(t):
        return i + 0.5
    return i


def _rows(artifact: str, n: int = 3) -> list[dict]:
    return [{f.name: _value(f, i) for f in ARTIFACTS[artifact] if f.name not in ("run", "round")} for i in range(n)]


@pytest.mark.parametrize("artifact", sorted(ARTIFACTS))
def test_every_artifact_round_trips(tmp_path, artifact):
    store = RunStore(RunLayout(tmp_path, "r1"))
    ref = store.write(2, "stagex", artifact, _rows(artifact))
    Manifest("stagex", "r1", 2, "k", 1, artifacts={artifact: ref}).write(store.layout.manifest_path(2, "stagex"))
    table = store.read(2, "stagex", artifact)
    assert table.schema.equals(ARTIFACTS[artifact], check_metadata=False)
    assert table.to_pylist() == [{"run": "r1", "round": 2, **row} for row in _rows(artifact)]


def test_unknown_column_is_rejected(tmp_path):
    store = RunStore(RunLayout(tmp_path, "r1"))
    with pytest.raises(ValueError, match="not in schema"):
        store.write(0, "s", "evals", [{**_rows("evals", 1)[0], "bogus": 1}])


def test_corrupt_and_missing_artifacts_name_file_and_stage(tmp_path):
    store = RunStore(RunLayout(tmp_path, "r1"))
    with pytest.raises(ArtifactError, match="stage 'rollout' of round 0.*coevolve stage rollout"):
        store.read(0, "rollout", "trajectories")
    ref = store.write(0, "rollout", "trajectories", _rows("trajectories"))
    store.write_manifest(Manifest("rollout", "r1", 0, "k", 1, artifacts={"trajectories": ref}))
    path = store.layout.artifact_path(0, "rollout", "trajectories")
    path.write_bytes(b"not parquet at all")
    with pytest.raises(ArtifactError, match=r"corrupt artifact .*trajectories\.parquet.*coevolve stage rollout"):
        store.read(0, "rollout", "trajectories")


def test_writes_leave_no_temporary_files(tmp_path):
    store = RunStore(RunLayout(tmp_path, "r1"))
    store.write(0, "s", "evals", _rows("evals"))
    store.write(0, "s", "evals", _rows("evals", 5))  # replaced atomically, not appended
    files = sorted(p.name for p in store.layout.stage_dir(0, "s").iterdir())
    assert files == ["evals.parquet"]


def test_cache_key_changes_with_each_ingredient():
    base = cache_key("rollout", 1, {"k": 8}, {"policy": "a"})
    assert base == cache_key("rollout", 1, {"k": 8}, {"policy": "a"})
    assert base != cache_key("rollout", 2, {"k": 8}, {"policy": "a"})
    assert base != cache_key("rollout", 1, {"k": 4}, {"policy": "a"})
    assert base != cache_key("rollout", 1, {"k": 8}, {"policy": "b"})


def test_manifest_unreadable_is_none(tmp_path):
    path = tmp_path / "_manifest.json"
    path.write_text("{half")
    assert Manifest.read(path) is None


def test_catalog_views_expose_hive_columns(tmp_path):
    for run in ("a", "b"):
        store = RunStore(RunLayout(tmp_path, run))
        for r in (0, 1):
            store.write(r, "evaluate", "evals", _rows("evals", 2))
    assert build_catalog(tmp_path) == tmp_path / "catalog.duckdb"
    table = query(tmp_path, "SELECT run, round, stage, count(*) AS n FROM evals GROUP BY ALL ORDER BY ALL")
    assert table.to_pylist() == [
        {"run": run, "round": r, "stage": "evaluate", "n": 2} for run in ("a", "b") for r in (0, 1)
    ]


def test_a_corrupt_file_is_left_out_of_its_view_and_named(tmp_path):
    from coevolve.flows.render import unreadable_notes
    from coevolve.storage.catalog import ArtifactFiles

    store = RunStore(RunLayout(tmp_path, "a"))
    for r in (0, 1, 2):
        store.write(r, "evaluate", "evals", _rows("evals", 2))
    broken = store.layout.artifact_path(1, "evaluate", "evals")
    broken.write_bytes(broken.read_bytes()[:40])  # half-written
    assert build_catalog(tmp_path) is not None
    rounds = query(tmp_path, "SELECT DISTINCT round FROM evals ORDER BY round").column("round").to_pylist()
    assert rounds == [0, 2]
    files = ArtifactFiles.scan(tmp_path)
    assert files.unreadable == [broken.resolve()] and not files.complete("evals")
    (note,) = unreadable_notes(files.unreadable)
    assert "coevolve stage evaluate --run a --round 1 --force" in note


def test_bad_run_names_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="invalid run name"):
        RunLayout(tmp_path, "../escape")


def test_the_catalog_opens_after_the_runs_folder_is_copied_elsewhere(tmp_path, monkeypatch):
    import shutil

    import duckdb

    store = RunStore(RunLayout(tmp_path / "a", "demo"))
    store.write(0, "merge", "datasets", [{"dataset_version": 1, "task_id": "t", "weight": 1.0, "added_round": 1}])
    build_catalog(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "elsewhere" / "b")
    shutil.rmtree(tmp_path / "a")  # the original is gone
    sql = "SELECT run, round, stage, task_id FROM datasets"
    monkeypatch.chdir(tmp_path / "elsewhere" / "b")  # opened from inside the folder
    with duckdb.connect("catalog.duckdb", read_only=True) as con:
        assert con.sql(sql).fetchall() == [("demo", 0, "merge", "t")]
    monkeypatch.chdir(tmp_path)  # or from anywhere, naming the folder once
    with duckdb.connect(str(tmp_path / "elsewhere" / "b" / "catalog.duckdb"), read_only=True) as con:
        con.execute(f"SET file_search_path = '{tmp_path / 'elsewhere' / 'b'}'")
        assert con.sql(sql).fetchall() == [("demo", 0, "merge", "t")]
