"""`coevolve run --run NAME --dry-run` plans the rounds the run would cover: after `--more` took a run past
its saved `run.rounds`, the completed ones (README: the next `coevolve run --run NAME` recomputes every stale
stage of every completed round), with `--more`/`--rounds` as the run takes them, and says which stale stages
it recomputes and which rounds it adds. A run's manifests are written by hand (no model runs)."""

from __future__ import annotations

from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.config import load_config
from coevolve.stages.round_plan import round_plan
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import InputRef, Manifest
from tests.conftest import CONFIGS


def continued_run(root, completed: int) -> RunLayout:
    """Run `demo` of test-tiny.yaml saved with `run.rounds: 1` and `completed` rounds of manifests (as after
    `--more`); round 0's update read a rollout output that has changed since: it is stale."""
    config = load_config(CONFIGS / "test-tiny.yaml", ["run.rounds=1"])
    layout = RunLayout(root, "demo")
    layout.run_dir.mkdir(parents=True)
    layout.config_path.write_text(config.to_yaml())
    for round_ in range(completed):
        for at, stage in enumerate(round_plan(config, round_)):
            manifest = Manifest(stage.name, "demo", round_, "key", 1, started_at=round_ * 100 + at,
                                outputs={"rows": "now"})  # fmt: skip
            if (round_, stage.name) == (0, "grpo_update"):
                manifest.read_from = [InputRef(0, "rollout", "outputs.rows", "before")]
            manifest.write(layout.manifest_path(round_, stage.name))
    return layout


def plan(root, *args: str) -> str:
    result = CliRunner().invoke(app, ["run", "--run", "demo", "--dry-run", "--root", str(root), *args],
                                terminal_width=400)  # fmt: skip
    assert result.exit_code == 0, result.output
    return result.output


def test_the_dry_run_plans_the_rounds_the_run_would_cover_not_the_saved_run_rounds(tmp_path):
    continued_run(tmp_path, completed=3)
    shown = plan(tmp_path)
    assert "run demo: 3 rounds" in shown
    assert "continues: 3 rounds completed; recomputes 1 stale stage from round 0; adds no round" in shown
    assert "24 rollout episodes (3 rounds x 2 tasks x K = 4)" in shown

    more = plan(tmp_path, "--more", "1")
    assert "run demo: 4 rounds" in more and "recomputes 1 stale stage from round 0; adds round 3" in more
    assert "run demo: 5 rounds" in plan(tmp_path, "--rounds", "5")
    refused = CliRunner().invoke(app, ["run", "--run", "demo", "--dry-run", "--root", str(tmp_path), "--more", "-1"])
    assert refused.exit_code != 0 and "more must be >= 0, got -1" in refused.output


def test_a_new_run_plans_its_config_rounds_and_no_continuation(tmp_path):
    shown = CliRunner().invoke(app, ["run", str(CONFIGS / "test-tiny.yaml"), "--dry-run", "--root", str(tmp_path),
                                     "--more", "3"]).output  # fmt: skip
    assert "run test-tiny: 3 rounds" in shown and "continues:" not in shown
    assert not any(tmp_path.iterdir())  # nothing written
