"""A runs folder moved or copied anywhere continues with its own checkpoints (named relative to the run; an
older absolute or working-directory path is read by its `checkpoints/round=R` tail), and bytes that are not
the ones recorded are never used: a checkpoint other than the manifest's is refused in one line, weights
are hashed when loaded (once per process, never after this process saved them), Parquet pages carry
checksums, and a cache hit means the files hash as recorded, whatever their modification time says
(issue 38, items 1 and 3)."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch

from coevolve import file_hashes
from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.runner import is_cached, run_stage, stage_key
from coevolve.pipeline.stage import StageDef, StageResult
from coevolve.rl import checkpoint as rl_checkpoint
from coevolve.rl.checkpoint import CorruptCheckpointError, load_weights, save_checkpoint
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.grpo_update.stage import GRPO_UPDATE
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import ArtifactError, read_table
from coevolve.storage.schemas import schema_for
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS, fake_context
from tests.unit.test_storage import _rows

CONFIG = load_config(CONFIGS / "test-tiny.yaml")


def round_zero(root: Path, tokenizer):
    ctx = fake_context(CONFIG, root, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, GRPO_UPDATE):
        run_stage(stage, ctx, 0)
    return ctx


def new_process(monkeypatch) -> None:
    """Forget the hashes this process knows, as a new `coevolve` process would."""
    monkeypatch.setattr(file_hashes, "_HASHED", {})


def flip_keeping_mtime(path: Path, offset: int, value: bytes) -> None:
    """Overwrite bytes of `path` in place and put its modification time back."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[offset : offset + len(value)] = value
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size


def loaded_directories(monkeypatch) -> list[Path]:
    """The checkpoint folders `load_weights` loads from from now on."""
    loaded = []

    def recording(model, directory, *, lora):
        loaded.append(Path(directory).resolve())
        return load_weights(model, directory, lora=lora)

    monkeypatch.setattr(rl_checkpoint, "load_weights", recording)
    return loaded


# ---------------------------------------------------------------- item 1: a moved or copied run


def test_a_copied_or_moved_runs_folder_continues_with_its_own_weights(tmp_path, tokenizer, monkeypatch):
    monkeypatch.chdir(tmp_path)
    round_zero(Path("runs"), tokenizer)  # a root relative to the working directory
    shutil.copytree("runs", "copy/runs")
    own = (tmp_path / "copy/runs/run=evo/checkpoints/round=0").resolve()
    loaded = loaded_directories(monkeypatch)
    copied = fake_context(CONFIG, Path("copy/runs"), tokenizer)
    assert copied.policy_after(0)[1].resolve() == own
    assert not run_stage(ROLLOUT, copied, 1).cached
    assert loaded == [own]  # not runs/run=evo/checkpoints/round=0, which exists too

    manifest = copied.store.manifest(0, "grpo_update")
    assert manifest.outputs["checkpoint"] == "checkpoints/round=0"
    assert copied.store.read(0, "grpo_update", "updates").column("checkpoint").to_pylist() == ["checkpoints/round=0"]

    # manifests of older versions recorded the path as built: its tail names this run's own folder
    for recorded in (str(tmp_path / "runs/run=evo/checkpoints/round=0"), "runs/run=evo/checkpoints/round=0"):
        manifest.outputs["checkpoint"] = recorded
        copied.store.write_manifest(manifest)
        assert fake_context(CONFIG, Path("copy/runs"), tokenizer).policy_after(0)[1].resolve() == own

    # moved: the original is gone, and the next update (and a forced one) still finds the weights
    shutil.rmtree("runs")
    moved = fake_context(CONFIG, tmp_path / "copy/runs", tokenizer)
    assert not run_stage(GRPO_UPDATE, moved, 1).cached
    assert not run_stage(GRPO_UPDATE, fake_context(CONFIG, tmp_path / "copy/runs", tokenizer), 1, force=True).cached
    assert loaded[1:] == [own, own]


def test_a_checkpoint_that_is_not_the_one_its_manifest_names_is_refused_in_one_line(tmp_path, tokenizer):
    ctx = round_zero(tmp_path, tokenizer)
    policy = ctx.use_policy(0)
    with torch.no_grad():  # another valid checkpoint (its own marker agrees with it) in round 0's folder
        next(p for p in policy.model.parameters()).add_(1.0)
    save_checkpoint(policy.model, policy.tokenizer, policy.optimizer, ctx.store.layout.checkpoint_dir(0))

    fresh = fake_context(CONFIG, tmp_path, tokenizer)
    with pytest.raises(ArtifactError) as refused:
        run_stage(ROLLOUT, fresh, 1)
    message = str(refused.value)
    assert "\n" not in message and "checkpoints/round=0" in message and "model.safetensors" in message
    assert "coevolve stage grpo_update --run evo --round 0 --force" in message
    assert not run_stage(GRPO_UPDATE, fresh, 0).cached  # its files are not the recorded ones: it runs again
    assert not run_stage(ROLLOUT, fresh, 1).cached


# ---------------------------------------------------------------- item 3: corruption


def test_a_byte_flipped_checkpoint_with_its_mtime_put_back_is_neither_cached_nor_loaded(
    tmp_path, tokenizer, monkeypatch
):
    ctx = round_zero(tmp_path, tokenizer)
    weights = ctx.store.layout.checkpoint_dir(0) / "model.safetensors"
    flip_keeping_mtime(weights, weights.stat().st_size - 64, b"\xff" * 16)  # NaNs in the last tensor
    new_process(monkeypatch)

    fresh = fake_context(CONFIG, tmp_path, tokenizer)
    assert is_cached(GRPO_UPDATE, fresh, 0, stage_key(GRPO_UPDATE, fresh, 0)) is None
    with pytest.raises(ArtifactError, match=r"^checkpoint .*round=0 of policy r0-\w+ is refused: model\.safetensors "
                                            r"does not load as the file grpo_update of round 0 in run 'evo' saved"):
        fresh.use_policy(0)
    fresh.policy.load_base()
    with pytest.raises(CorruptCheckpointError, match=r"model\.safetensors is not the one saved \(sha256"):
        load_weights(fresh.policy.model, weights.parent, lora=False)  # the loader's own check (the marker's)


def test_weights_are_hashed_when_loaded_once_per_process_and_not_after_saving(tmp_path, tokenizer, monkeypatch):
    ctx = fake_context(CONFIG, tmp_path, tokenizer)
    ctx.policy.load_base()
    model, directory = ctx.policy.model, tmp_path / "checkpoint"
    save_checkpoint(model, ctx.policy.tokenizer, ctx.policy.make_optimizer(), directory)
    weights = directory / "model.safetensors"
    marker = json.loads((directory / rl_checkpoint.MARKER).read_text())
    assert marker["sha256"]["model.safetensors"] == file_hashes._hash_file(weights)

    hashed = []
    real = file_hashes._hash_file
    monkeypatch.setattr(file_hashes, "_hash_file", lambda path: hashed.append(Path(path).name) or real(path))
    load_weights(model, directory, lora=False)
    rl_checkpoint.read_optimizer_state(directory)
    assert hashed == []  # this process saved them
    new_process(monkeypatch)
    for _ in range(3):
        load_weights(model, directory, lora=False)
        rl_checkpoint.read_optimizer_state(directory)
    assert sorted(hashed) == ["model.safetensors", "optimizer.pt"]


def test_no_flipped_bit_of_a_parquet_artifact_reads_back_as_other_values(tmp_path):
    store = RunStore(RunLayout(tmp_path, "r"))
    ref = store.write(0, "rollout", "trajectories", _rows("trajectories", 200))
    store.write_manifest(Manifest("rollout", "r", 0, "k", 1, artifacts={"trajectories": ref}))
    path = store.layout.artifact_path(0, "rollout", "trajectories")
    good, expected = path.read_bytes(), store.read(0, "rollout", "trajectories").to_pylist()
    rng, outcomes = random.Random(0), {"refused": 0, "same": 0, "changed": 0}
    for _ in range(300):
        bit = rng.randrange(len(good) * 8)
        data = bytearray(good)
        data[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(data))
        try:  # the file alone (page checksums), without the manifest's hash
            rows = read_table(path, schema_for("trajectories"), rebuild_hint="").to_pylist()
            outcomes["same" if rows == expected else "changed"] += 1
        except ArtifactError:
            outcomes["refused"] += 1
        with pytest.raises(ArtifactError, match="corrupt artifact"):  # through the manifest: every flip
            store.read(0, "rollout", "trajectories")
    assert outcomes["changed"] == 0 and outcomes["refused"] > 200, outcomes


def test_a_cache_hit_means_the_artifact_hashes_as_recorded_whatever_its_mtime(tmp_path, monkeypatch):
    rows = _rows("evals", 50)
    stage = StageDef("evaluate", 1, config=("eval",), reads={},
                     compute=lambda ctx, round_, inputs: StageResult({"evals": rows}, {}))  # fmt: skip
    ctx = open_run(CONFIG, "demo", tmp_path, quiet=True)
    assert not run_stage(stage, ctx, 0).cached
    assert run_stage(stage, ctx, 0).cached
    path = ctx.store.layout.artifact_path(0, "evaluate", "evals")
    flip_keeping_mtime(path, path.stat().st_size // 3, bytes([path.read_bytes()[path.stat().st_size // 3] ^ 1]))
    new_process(monkeypatch)
    assert not run_stage(stage, ctx, 0).cached
    assert ctx.store.read(0, "evaluate", "evals").num_rows == 50
