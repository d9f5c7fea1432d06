"""Warm starts trained as LoRA adapters: the adapter is kept beside the merged checkpoint, can be shipped,
and merging a shipped adapter gives the checkpoint the build gave, without training."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from coevolve.config import load_config
from coevolve.llm.models import load_model
from coevolve.rl.warm_start import WarmStart
from coevolve.stages.warm_start.adapters import ADAPTER, RECORD, ship, shipped_adapter
from coevolve.stages.warm_start.build import build_warm_starts, start_paths, warm_start_key, with_warm_starts
from tests.conftest import CONFIGS

LORA_STARTS = ["warm_start.policy_tasks=2", "warm_start.teacher_tasks=2", "warm_start.epochs=1",
               "warm_start.lora_rank=4", "warm_start.lr=1e-3"]  # fmt: skip


def test_lora_settings_name_a_start_only_when_lora_is_on():
    config = load_config(CONFIGS / "test-tiny.yaml")
    assert "lora_rank" not in WarmStart().key_fields()  # full fine-tunes keep the names they always had
    assert warm_start_key(config, WarmStart(lora_alpha=8.0)) == warm_start_key(config, WarmStart())
    assert warm_start_key(config, WarmStart(lora_rank=8)) != warm_start_key(config, WarmStart())
    assert warm_start_key(config, WarmStart(lora_rank=8)) != warm_start_key(config, WarmStart(lora_rank=8, lora_alpha=8.0))
    with pytest.raises(ValueError, match="lora_rank"):
        WarmStart(lora_rank=-1)


@pytest.mark.slow
def test_a_shipped_adapter_merges_into_the_start_its_build_made(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path / "cache"))
    spec = load_config(CONFIGS / "test-tiny.yaml", LORA_STARTS)
    named = with_warm_starts(spec)
    starts = start_paths(spec, named)
    assert [p.name for p in build_warm_starts(spec, named, shipped=tmp_path / "none")] == [p.name for p in starts]
    policy, teacher = starts
    adapter = load_file(policy / ADAPTER / "adapter_model.safetensors")
    assert adapter and all(t.dtype == torch.bfloat16 for t in adapter.values())
    assert json.loads((teacher / ADAPTER / "adapter_config.json").read_text())["base_model_name_or_path"] == (
        f"warm-start/{policy.name}")  # a name, not this machine's cache path
    built = [load_model(str(p))[0].state_dict() for p in starts]

    shipped = tmp_path / "shipped"
    assert [ship(p, shipped).name for p in starts] == [p.name for p in starts]
    for path in starts:
        assert shipped_adapter(path.name, shipped) is not None
        (path / RECORD).unlink()  # the cache lacks the starts: a fresh machine

    assert build_warm_starts(spec, named, shipped=shipped) == starts
    for path, weights in zip(starts, built, strict=True):
        record = json.loads((path / RECORD).read_text())
        assert record["merged_from"] == f"configs/warm-starts/{path.name}" and record["losses"]
        assert record["merge_seconds"] >= 0
        merged = load_model(str(path))[0].state_dict()
        assert merged.keys() == weights.keys()
        assert all(torch.equal(merged[k], weights[k]) for k in weights)
    assert build_warm_starts(spec, named, shipped=shipped) == []  # cached: nothing to do


def test_only_a_complete_shipped_adapter_counts(tmp_path):
    folder = tmp_path / "abc123"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    assert shipped_adapter("abc123", tmp_path) is None
    (folder / "adapter_model.safetensors").write_bytes(b"")
    (folder / RECORD).write_text("{}")
    assert shipped_adapter("abc123", tmp_path) == folder
    assert shipped_adapter("other", tmp_path) is None


def test_shipping_a_full_fine_tune_is_one_clear_error(tmp_path):
    (tmp_path / "start").mkdir()
    with pytest.raises(ValueError, match="no LoRA adapter to ship"):
        ship(tmp_path / "start", tmp_path / "shipped")


def test_a_damaged_shipped_adapter_is_one_line_naming_it_and_the_rebuild(tmp_path, monkeypatch):
    from coevolve.storage.parquet import ArtifactError

    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path / "cache"))
    spec = load_config(CONFIGS / "test-tiny.yaml", LORA_STARTS[:1] + LORA_STARTS[2:])  # a policy start only
    named = with_warm_starts(spec)
    folder = tmp_path / "shipped" / start_paths(spec, named)[0].name
    folder.mkdir(parents=True)
    for name, text in (("adapter_config.json", "{}"), ("adapter_model.safetensors", "not weights"), (RECORD, "{")):
        (folder / name).write_text(text)
    with pytest.raises(ArtifactError, match=rf"shipped warm start {folder} does not load .*--rebuild --ship$"):
        build_warm_starts(spec, named, shipped=tmp_path / "shipped")


def test_warm_start_command_on_a_config_without_starts_is_one_line():
    from typer.testing import CliRunner

    from coevolve.cli import app

    result = CliRunner().invoke(app, ["models", "warm-start", str(CONFIGS / "test-tiny.yaml")], terminal_width=400)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: {CONFIGS / 'test-tiny.yaml'}: no warm start to build (warm_start.policy_tasks and "
        "warm_start.teacher_tasks are 0)"]
