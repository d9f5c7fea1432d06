"""`coevolve fork` names each stage it could not share and why: a checkpoint pruned from the source, a
stage the source never computed; the rounds after a recomputed one."""

from __future__ import annotations

from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.config import load_config
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from tests.conftest import CONFIGS

TINY = CONFIGS / "test-tiny.yaml"


def pruned_source(root) -> RunLayout:
    """Run `src`: only round 0's update recorded, its checkpoint folder since pruned."""
    layout = RunLayout(root, "src")
    layout.config_path.parent.mkdir(parents=True)
    layout.config_path.write_text(load_config(TINY).to_yaml())
    Manifest("grpo_update", "src", 0, "k", 1,
             outputs={"checkpoint": "checkpoints/round=0"}).write(layout.manifest_path(0, "grpo_update"))  # fmt: skip
    return layout


def test_fork_says_which_stages_it_recomputes_and_why(tmp_path):
    pruned_source(tmp_path)
    result = CliRunner().invoke(app, ["fork", "--from", "src", "--run", "dst", "--rounds", "2", "--root", str(tmp_path)],
                                terminal_width=400)  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.output
    assert "run 'dst': 0 stages copied from 'src'" in out and "not shared, computed when the run continues:" in out
    assert ("round 0 grpo_update: recomputed, its checkpoint (checkpoints/round=0) was pruned from 'src' "
            "(train.keep_checkpoints keeps only the newest ones)") in out
    assert "round 0 rollout: recomputed, 'src' has not computed it" in out
    assert "round 1: recomputed, reads what round 0's recomputed stages compute" in out
