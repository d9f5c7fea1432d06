"""A runs folder may be shared or untarred from elsewhere: a symlink planted in it (the lock, a manifest, a
Parquet file, a checkpoint, a temporary name) is refused in one line naming it, and the file it leads to
keeps its bytes. A full disk or a file-size limit at a write (Parquet, manifest, lock, checkpoint weights,
optimizer state) is one paragraph naming the file and its size, and leaves no temporary file behind."""

from __future__ import annotations

import os
import resource
import sys
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.rl.checkpoint import OPTIMIZER_FILE, drop_optimizer_state, read_optimizer_state, save_checkpoint
from coevolve.run_files import DiskFullError, PlantedLinkError
from coevolve.storage.layout import RunLayout
from coevolve.storage.lock import RunLockedError, run_lock
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import ArtifactError
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS

ROW = {"split": "test", "task_id": "t1", "family": "f", "trajectory_id": "j1", "policy_version": "base",
       "greedy": True, "reward": 1.0, "success": True}  # fmt: skip
VICTIM = b"the user's own notes\n"


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "home" / "notes.txt"
    path.parent.mkdir()
    path.write_bytes(VICTIM)
    return path


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def test_a_lock_planted_as_a_symlink_is_refused_and_its_target_kept(tmp_path, victim):
    layout = RunLayout(tmp_path / "runs", "x")
    link = plant(layout.run_dir / ".lock", victim)
    with pytest.raises(PlantedLinkError, match=rf"^{link} is a symlink \(to {victim}\);.*`rm {link}`"), \
            run_lock(layout, "coevolve run configs/test-tiny.yaml"):
        pass
    assert victim.read_bytes() == VICTIM and link.is_symlink()


def test_a_lock_with_a_second_name_gets_a_file_of_its_own_and_the_other_name_is_kept(tmp_path, victim):
    """A hard link planted at the lock, or the README's `cp -al runs runs-before` snapshot: the run is
    written, under a lock file of its own, and the other name keeps its bytes."""
    layout = RunLayout(tmp_path / "runs", "x")
    layout.run_dir.mkdir(parents=True)
    os.link(victim, layout.run_dir / ".lock")
    with run_lock(layout, "coevolve run"):
        lock = layout.run_dir / ".lock"
        assert lock.stat().st_nlink == 1 and not os.path.samefile(lock, victim)
        assert b"coevolve run" in lock.read_bytes()
        with pytest.raises(RunLockedError, match="coevolve run"), run_lock(layout, "coevolve stage"):
            pass
    assert victim.read_bytes() == VICTIM


def test_the_cli_refuses_a_planted_lock_in_one_line(tmp_path, victim):
    layout = RunLayout(tmp_path / "runs", "x")
    (layout.run_dir / "round=0").mkdir(parents=True)
    layout.config_path.write_text((CONFIGS / "test-tiny.yaml").read_text())
    link = plant(layout.run_dir / ".lock", victim)
    done = CliRunner().invoke(app, ["stage", "bootstrap", "--run", "x", "--round", "0", "--root", str(layout.root)])
    assert done.exit_code == 2, done.output
    assert f"{link} is a symlink" in done.output and "Traceback" not in done.output
    assert victim.read_bytes() == VICTIM


def test_planted_parquet_manifest_and_folder_symlinks_are_refused_and_their_targets_kept(tmp_path, victim):
    store = RunStore(RunLayout(tmp_path / "runs", "x"))
    artifact = plant(store.layout.artifact_path(0, "evaluate", "evals"), victim)
    with pytest.raises(PlantedLinkError, match=rf"^{artifact} is a symlink"):
        store.write(0, "evaluate", "evals", [ROW])
    manifest_link = plant(store.layout.manifest_path(0, "baseline"), victim)
    with pytest.raises(PlantedLinkError, match=rf"^{manifest_link} is a symlink"):
        store.write_manifest(Manifest("baseline", "x", 0, "key", 1))
    with pytest.raises(PlantedLinkError, match=rf"^{manifest_link} is a symlink"):
        store.invalidate(0, "baseline")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = plant(store.layout.run_dir / "round=1", elsewhere)
    with pytest.raises(PlantedLinkError, match=rf"^{folder} is a symlink .*a folder above"):
        store.write(1, "evaluate", "evals", [ROW])
    assert victim.read_bytes() == VICTIM and list(elsewhere.iterdir()) == []


def test_a_run_folder_linked_into_a_view_root_is_still_read(tmp_path):
    """Reading is not writing: the web view may show a run linked into its root."""
    RunStore(RunLayout(tmp_path / "elsewhere", "b")).write_manifest(Manifest("baseline", "b", 0, "key", 1))
    plant(tmp_path / "view" / "run=b", tmp_path / "elsewhere" / "run=b")
    assert RunStore(RunLayout(tmp_path / "view", "b")).manifest(0, "baseline").key == "key"


class Tiny(nn.Module):
    """A model with `save_pretrained`, as a Hugging Face model has, and an AdamW state after one step."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.optimizer = torch.optim.AdamW(self.parameters())
        self.lin(torch.ones(1, width)).sum().backward()
        self.optimizer.step()

    def save_pretrained(self, directory: Path, state_dict: dict | None = None) -> None:
        from safetensors.torch import save_file

        save_file(state_dict or self.state_dict(), str(Path(directory) / "model.safetensors"))


def test_a_planted_checkpoint_folder_or_temporary_name_is_refused_and_its_target_kept(tmp_path, victim):
    layout, model = RunLayout(tmp_path / "runs", "x"), Tiny()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.safetensors").write_bytes(VICTIM)
    folder = plant(layout.checkpoint_dir(0), elsewhere)
    with pytest.raises(PlantedLinkError, match=rf"^{folder} is a symlink"):
        save_checkpoint(model, None, model.optimizer, layout.checkpoint_dir(0))
    tmp = plant(layout.checkpoint_dir(1).with_name(f"round=1.tmp-{os.getpid()}"), elsewhere)
    with pytest.raises(PlantedLinkError, match=rf"^{tmp} is a symlink"):
        save_checkpoint(model, None, model.optimizer, layout.checkpoint_dir(1))
    assert sorted(p.name for p in elsewhere.iterdir()) == ["model.safetensors"]
    assert (elsewhere / "model.safetensors").read_bytes() == VICTIM


def test_a_planted_optimizer_note_is_refused_and_its_target_kept(tmp_path, victim):
    layout, model = RunLayout(tmp_path / "runs", "x"), Tiny()
    for round_ in (0, 1):
        save_checkpoint(model, None, model.optimizer, layout.checkpoint_dir(round_))
    note = plant(layout.checkpoint_dir(0) / "optimizer.dropped", victim)
    with pytest.raises(PlantedLinkError, match=rf"^{note} is a symlink"):
        drop_optimizer_state(layout.checkpoint_dir(0), layout.checkpoint_dir(1))
    assert victim.read_bytes() == VICTIM and (layout.checkpoint_dir(0) / OPTIMIZER_FILE).is_file()


@contextmanager
def file_size_limit(limit: int):
    """This process's `ulimit -f` lowered for the block (Python ignores SIGXFSZ: a write past it fails)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as Linux enforces it")
def test_the_file_size_limit_at_the_optimizer_state_names_the_file_and_its_size(tmp_path):
    layout, model = RunLayout(tmp_path / "runs", "x"), Tiny(width=128)  # weights 66 kB, optimizer 132 kB
    save_checkpoint(model, None, model.optimizer, layout.checkpoint_dir(0))
    kept = (layout.checkpoint_dir(0) / OPTIMIZER_FILE).read_bytes()
    with file_size_limit(100_000), pytest.raises(DiskFullError) as refused:
        save_checkpoint(model, None, model.optimizer, layout.checkpoint_dir(1))
    message = str(refused.value)
    assert f"stopped the write of {layout.checkpoint_dir(1) / OPTIMIZER_FILE}: it needs about 13" in message
    assert "file-size limit of this process (100.0 kB, `ulimit -f`)" in message and "\n" not in message
    assert isinstance(refused.value, ArtifactError)  # shown by the CLI as one paragraph, no traceback
    assert sorted(p.name for p in layout.checkpoint_dir(0).parent.iterdir()) == ["round=0"]  # no temporary left
    assert (layout.checkpoint_dir(0) / OPTIMIZER_FILE).read_bytes() == kept
    save_checkpoint(model, None, model.optimizer, layout.checkpoint_dir(1))  # the limit lifted
    assert read_optimizer_state(layout.checkpoint_dir(1))["state"].keys() == {0, 1}


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as Linux enforces it")
def test_the_file_size_limit_at_a_parquet_file_names_the_file_and_its_size(tmp_path):
    store = RunStore(RunLayout(tmp_path / "runs", "x"))
    rows = pa.table({"x": list(range(100_000))})
    with file_size_limit(50_000), pytest.raises(DiskFullError, match=r"write of .*t\.parquet: it needs about 800"):
        from coevolve.storage.parquet import write_table

        write_table(rows, store.layout.run_dir / "t.parquet")
    assert list(store.layout.run_dir.iterdir()) == []


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as Linux enforces it")
def test_the_file_size_limit_at_the_lock_names_the_lock(tmp_path):
    layout = RunLayout(tmp_path / "runs", "x")
    layout.run_dir.mkdir(parents=True)
    with file_size_limit(10), pytest.raises(DiskFullError, match=rf"write of {layout.run_dir / '.lock'}: it needs"), \
            run_lock(layout, "coevolve run"):
        pass
