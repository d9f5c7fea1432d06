"""Stale told from manifests alone (`storage.staleness.stale_stages`, what the web view and the notebook
call): a stage whose recorded upstream value changed, whose upstream run is gone or stale, or whose config
fields the saved config now sets otherwise. Beside it two writes of a runs folder: the catalog on a full
disk is one paragraph, and a fork's checkpoint copy never goes through a planted symlink."""

from __future__ import annotations

import os

import duckdb
import pytest
import yaml

from coevolve.config import load_config
from coevolve.core import content_hash
from coevolve.flows import fork
from coevolve.run_files import DiskFullError, PlantedLinkError
from coevolve.storage import catalog
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import ArtifactRef, InputRef, Manifest
from coevolve.storage.staleness import stale_stages
from tests.conftest import CONFIGS

CONFIG = load_config(CONFIGS / "test-tiny.yaml")


def write(layout: RunLayout, round_: int, stage: str, *, artifacts: dict[str, str] | None = None,
          read_from: list[InputRef] = (), outputs: dict | None = None, fields: list[str] = ()) -> None:  # fmt: skip
    manifest = Manifest(stage, layout.run, round_, f"key-{stage}", 1, outputs=outputs or {},
                        read_from=list(read_from), config_fields=list(fields),
                        config_hash=content_hash(CONFIG.select(fields), length=24) if fields else "")  # fmt: skip
    manifest.artifacts = {name: ArtifactRef(name, f"{name}.parquet", 1, sha, 1)
                          for name, sha in (artifacts or {}).items()}  # fmt: skip
    path = layout.manifest_path(round_, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest.write(path)


@pytest.fixture
def layout(tmp_path) -> RunLayout:
    """Round 0's rollout and update, round 1's rollout drawn with round 0's policy; nothing stale."""
    layout = RunLayout(tmp_path, "demo")
    layout.run_dir.mkdir(parents=True)
    layout.config_path.write_text(CONFIG.to_yaml())
    write(layout, 0, "rollout", artifacts={"samples": "aaa"}, fields=["rollout"])
    write(layout, 0, "grpo_update", read_from=[InputRef(0, "rollout", "artifacts.samples", "aaa")],
          outputs={"policy_version": "r0-1"}, fields=["train"])  # fmt: skip
    write(layout, 1, "rollout", read_from=[InputRef(0, "grpo_update", "outputs.policy_version", "r0-1")],
          artifacts={"samples": "bbb"}, fields=["rollout"])  # fmt: skip
    return layout


def test_nothing_is_stale_while_every_recorded_input_is_what_its_upstream_holds(layout):
    assert stale_stages(layout.run_dir) == []
    assert stale_stages(layout.root / "run=nobody") == []


def test_a_rewritten_upstream_artifact_makes_its_readers_stale_and_theirs_through_them(layout):
    write(layout, 0, "rollout", artifacts={"samples": "changed"}, fields=["rollout"])
    assert stale_stages(layout.run_dir) == [
        ("grpo_update", 0, "reads round 0 rollout's samples, rewritten since it ran"),
        ("rollout", 1, "reads the policy of round 0 grpo_update, which is stale"),
    ]


def test_an_upstream_run_that_is_gone_or_a_changed_policy_makes_a_stage_stale(layout):
    layout.manifest_path(0, "rollout").unlink()
    assert ("grpo_update", 0, "reads round 0 rollout's samples, which has not completed since it ran") in \
        stale_stages(layout.run_dir)  # fmt: skip
    write(layout, 0, "rollout", artifacts={"samples": "aaa"}, fields=["rollout"])
    write(layout, 0, "grpo_update", read_from=[InputRef(0, "rollout", "artifacts.samples", "aaa")],
          outputs={"policy_version": "r0-2"}, fields=["train"])  # fmt: skip
    assert stale_stages(layout.run_dir) == [("rollout", 1, "reads the policy of round 0 grpo_update, updated since it ran")]


def test_a_config_field_saved_since_a_stage_ran_makes_it_stale_and_a_manifest_without_a_record_is_not(layout):
    data = yaml.safe_load(layout.config_path.read_text())
    data["rollout"]["max_new_tokens"] = 8
    layout.config_path.write_text(yaml.safe_dump(data))
    stale = {(stage, round_): why for stage, round_, why in stale_stages(layout.run_dir)}
    assert stale == {("rollout", 0): "the run's config changed since it ran (its fields: rollout)",
                     ("grpo_update", 0): "reads round 0 rollout's samples, which is stale",
                     ("rollout", 1): "the run's config changed since it ran (its fields: rollout)"}  # fmt: skip
    write(layout, 0, "rollout", artifacts={"samples": "aaa"})  # no config record: as before it was kept
    assert [(stage, round_) for stage, round_, _ in stale_stages(layout.run_dir)] == [("rollout", 1)]


def test_the_catalog_on_a_full_disk_is_one_paragraph_and_the_old_one_stays(tmp_path, monkeypatch):
    (tmp_path / catalog.CATALOG).write_bytes(b"the old catalog")

    def full(*args, **kwargs):
        raise duckdb.IOException(f'IO Error: Could not write file "{args[0]}": No space left on device')

    monkeypatch.setattr(catalog.duckdb, "connect", full)
    with pytest.raises(DiskFullError) as raised:
        catalog.build_catalog(tmp_path)
    message = str(raised.value)
    assert message.startswith(f"No space left on the device holding {tmp_path / catalog.CATALOG}")
    assert "\n" not in message and "Free space and run the same command again" in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert (tmp_path / catalog.CATALOG).read_bytes() == b"the old catalog"


def test_a_fork_copying_a_checkpoint_refuses_a_planted_folder_link_and_writes_nothing_through_it(tmp_path,
                                                                                                monkeypatch):  # fmt: skip
    source = tmp_path / "run=src" / "checkpoints" / "round=0"
    source.mkdir(parents=True)
    (source / "model.safetensors").write_bytes(b"weights")
    elsewhere = tmp_path / "users-folder"
    elsewhere.mkdir()
    (tmp_path / "run=dst").mkdir()
    (tmp_path / "run=dst" / "checkpoints").symlink_to(elsewhere)
    monkeypatch.setattr(fork.os, "link", lambda *a: (_ for _ in ()).throw(OSError(18, "Invalid cross-device link")))
    with pytest.raises(PlantedLinkError, match=r"checkpoints is a symlink"):
        fork._link_tree(source, tmp_path / "run=dst" / "checkpoints" / "round=0")
    assert os.listdir(elsewhere) == []


def test_a_fork_across_file_systems_copies_the_checkpoint(tmp_path, monkeypatch):
    source = tmp_path / "run=src" / "checkpoints" / "round=0"
    source.mkdir(parents=True)
    (source / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(fork.os, "link", lambda *a: (_ for _ in ()).throw(OSError(18, "Invalid cross-device link")))
    target = tmp_path / "run=dst" / "checkpoints" / "round=0"
    fork._link_tree(source, target)
    assert (target / "model.safetensors").read_bytes() == b"weights"
    assert (target / "model.safetensors").stat().st_mtime_ns == (source / "model.safetensors").stat().st_mtime_ns


def test_the_catalogs_stages_table_has_a_stale_column_true_of_the_manifests_when_queried(layout):
    sql = "SELECT round, stage, stale, stale_why FROM stages ORDER BY round, stage"
    assert [row["stale"] for row in catalog.query(layout.root, sql).to_pylist()] == [False, False, False]
    write(layout, 0, "rollout", artifacts={"samples": "changed"}, fields=["rollout"])
    rows = catalog.query(layout.root, sql).to_pylist()
    assert [(r["round"], r["stage"], r["stale"]) for r in rows] == [
        (0, "grpo_update", True), (0, "rollout", False), (1, "rollout", True)]
    assert rows[0]["stale_why"] == "reads round 0 rollout's samples, rewritten since it ran"
