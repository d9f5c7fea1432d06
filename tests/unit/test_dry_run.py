"""`coevolve run CONFIG --dry-run`: every shipped config validates and prints its plan (rounds, D_0, splits,
budget, what differs from the paper), and nothing is written."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from tests.conftest import CONFIGS

SHIPPED = sorted(CONFIGS.glob("*.yaml"))


@pytest.mark.parametrize("config", SHIPPED, ids=[c.stem for c in SHIPPED])
def test_every_shipped_config_dry_runs_and_writes_nothing(config, tmp_path):
    result = CliRunner().invoke(app, ["run", str(config), "--dry-run", "--root", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "rollout episodes" in result.output and "differs from the paper:" in result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_plan_counts_the_budget_and_names_each_difference_from_the_paper(tmp_path):
    out = CliRunner().invoke(app, ["run", str(CONFIGS / "coverage-smollm2.yaml"), "--dry-run", "--root",
                                   str(tmp_path), "--set", "verify.judge=policy"]).output  # fmt: skip
    assert "data evolution after rounds: 0, 1, 2, 3" in out
    assert "signals: forgetting (solved before, failed now), boundary (some of a task's samples succeed)" in out
    assert "D_0: 12 tasks of split train (sample seed 24; a sampled twin of an evaluation task left out)" in out
    assert "gap-validation (96 tasks), validation (48 tasks)" in out
    assert "192 rollout episodes (8 rounds x 4 tasks x K = 6)" in out and "16 optimizer steps" in out
    assert "288 evaluation episodes (2 evaluations x 144 tasks x 1)" in out
    assert "deviation: verify.judge = policy (paper: execution" in out
    assert "deviation: evolve.every = 1 (paper: F = 10" in out
    assert "extension: train.clip_high = 0.28 (paper: = clip_low (one epsilon)): clip-higher (DAPO)" in out


def test_a_config_the_run_would_refuse_is_refused_by_the_dry_run(tmp_path):
    result = CliRunner().invoke(app, ["run", str(CONFIGS / "test-tiny.yaml"), "--dry-run", "--root", str(tmp_path),
                                      "--set", "eval.splits=[no-such-split]"])  # fmt: skip
    assert result.exit_code != 0 and "no-such-split" in result.output


def test_training_that_would_see_a_held_out_task_or_world_is_refused_naming_both_splits(tmp_path):
    """BFCL's stratified `train` holds 50 of the 100 `ae-test` tasks: bootstrapping D_0 in its worlds is
    refused; the shipped config explores `ae-train`'s."""
    args = ["run", str(CONFIGS / "bfcl-qwen3-4b.yaml"), "--dry-run", "--root", str(tmp_path)]
    assert CliRunner().invoke(app, args).exit_code == 0
    refused = CliRunner().invoke(app, [*args, "--set", "dataset.bootstrap_split=train"])
    assert refused.exit_code != 0
    assert ("dataset.bootstrap_split: train shares 50 tasks or worlds with the held-out split ae-test"
            in " ".join(refused.output.split()))  # fmt: skip


def _dry_run(tmp_path, *overrides: str, config: str = "test-tiny.yaml", root=None):
    args = ["run", str(CONFIGS / config), "--dry-run", "--root", str(root or tmp_path / "runs")]
    for override in overrides:
        args += ["--set", override]
    return CliRunner().invoke(app, args)


def _refused(result, field: str) -> str:
    assert result.exit_code != 0
    line = result.output.strip()
    assert "\n" not in line and field in line and "Traceback" not in line, result.output
    return line


def test_a_directory_that_is_no_model_is_refused_naming_the_field(tmp_path):
    assert "/etc is a directory but not a model" in _refused(_dry_run(tmp_path, "model.name=/etc"), "model.name")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    line = _refused(_dry_run(tmp_path, f"model.name={tmp_path / 'half'}"), "model.name")
    assert "no weights" in line


def test_a_device_this_machine_lacks_is_refused_and_cuda_without_a_gpu_is_a_warning(tmp_path):
    import torch

    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a CUDA device 7")
    assert "cuda:7" in _refused(_dry_run(tmp_path, "model.device=cuda:7"), "model.device")
    assert "not a torch device" in _refused(_dry_run(tmp_path, "model.device=gpu0"), "model.device")
    if torch.cuda.device_count() == 0:
        shown = _dry_run(tmp_path, "model.device=cuda")
        assert shown.exit_code == 0 and "model.device: cuda, and this machine has no CUDA device" in shown.output


def test_a_hub_model_not_cached_here_is_a_warning_unless_the_hub_is_off(tmp_path, monkeypatch):
    """The paper configs name Qwen/Qwen3-4B, which a GPU machine downloads: their dry run passes here."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    shown = _dry_run(tmp_path, "model.name=coevolve-tests/no-such-model")
    assert shown.exit_code == 0, shown.output
    assert "model.name: coevolve-tests/no-such-model is not in this machine's Hugging Face cache" in shown.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = _refused(_dry_run(tmp_path, "model.name=coevolve-tests/no-such-model"), "model.name")
    assert "HF_HUB_OFFLINE is set" in line


def test_an_accelerate_config_that_is_not_there_is_refused(tmp_path):
    line = _refused(_dry_run(tmp_path, "train.accelerate_config=no-such-launcher.yaml"), "train.accelerate_config")
    assert "no-such-launcher.yaml" in line
    assert _dry_run(tmp_path, "train.accelerate_config=configs/accelerate/two-processes.yaml").exit_code == 0


def test_a_storage_root_that_cannot_be_written_is_refused(tmp_path):
    (tmp_path / "a-file").write_text("")
    line = _refused(_dry_run(tmp_path, root=tmp_path / "a-file" / "runs"), "storage root")
    assert "is a file, not a folder" in line


def test_the_paper_config_dry_runs_here_and_says_what_a_gpu_machine_must_have(tmp_path):
    shown = _dry_run(tmp_path, config="bfcl-qwen3-4b.yaml")
    assert shown.exit_code == 0, shown.output
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache("Qwen/Qwen3-4B", "config.json"), str):
        assert "warnings (not here, needed where the run runs):" in shown.output
        assert "model.name: Qwen/Qwen3-4B is not in this machine's Hugging Face cache" in shown.output
