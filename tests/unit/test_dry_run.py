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
