"""A stage re-run leaves the stages that read it stale, and says so; the next `coevolve run --run NAME`
recomputes every one of them, whatever `--more` did before, and then nothing is stale (README's "Re-run,
resume, inspect"). A tiny run (test-tiny.yaml, cheap) taken to 2 rounds with `--more 1` past its saved
`run.rounds: 1`, then round 0's rollout re-run with another `rollout.max_new_tokens`."""

from __future__ import annotations

from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.staleness import stale_stages
from tests.conftest import CONFIGS

RUN = "stale"
CHEAP = ["run.rounds=1", "rollout.tasks_per_round=1", "rollout.k=2", "rollout.max_new_tokens=12",
         "eval.max_tasks=1", "train.beta=0"]  # fmt: skip


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def started(layout: RunLayout) -> dict[tuple[int, str], float]:
    return {(r, stage.name.removeprefix("stage=")): Manifest.read(stage / "_manifest.json").started_at
            for r in layout.rounds() for stage in (layout.run_dir / f"round={r}").glob("stage=*")}  # fmt: skip


def test_a_stage_rerun_shows_its_dependents_stale_and_the_next_run_recomputes_them(tmp_path, monkeypatch,
                                                                                   prefect_api):  # fmt: skip
    from coevolve.flows.coevolve import coevolve

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    coevolve(str(CONFIGS / "test-tiny.yaml"), run=RUN, overrides=CHEAP)  # round 0; the saved run.rounds is 1
    more = cli("run", "--run", RUN, "--more", "1")
    assert more.exit_code == 0, more.output
    layout = RunLayout(tmp_path, RUN)
    assert layout.rounds() == [0, 1] and stale_stages(layout.run_dir) == []
    listed = cli("runs")
    assert listed.exit_code == 0 and "stale" in listed.output and "recomputes them" not in listed.output

    rerun = cli("stage", "rollout", "--run", RUN, "--round", "0", "--set", "rollout.max_new_tokens=8")
    assert rerun.exit_code == 0 and "rollout round 0: computed" in rerun.output, rerun.output
    stale = {(round_, stage): why for stage, round_, why in stale_stages(layout.run_dir)}
    assert f"run '{RUN}': {len(stale)} stale stages, from round 0" in rerun.output, rerun.output
    assert stale[0, "grpo_update"] == "reads round 0 rollout's samples, rewritten since it ran"
    # the --set is saved: round 1's rollout reads it too, and it draws with the policy of a stale update
    assert stale[1, "rollout"].startswith("the run's config changed since it ran (its fields: rollout")
    assert {(0, "evaluate"), (0, "baseline"), (1, "grpo_update"), (1, "evaluate")} <= set(stale)
    assert (0, "bootstrap") not in stale and (0, "rollout") not in stale
    listed = cli("runs")
    assert listed.exit_code == 0
    assert f"run '{RUN}': {len(stale)} stale stages, from round 0" in listed.output, listed.output
    assert f"`coevolve run --run {RUN}` recomputes them" in listed.output

    before = started(layout)
    again = cli("run", "--run", RUN)
    assert again.exit_code == 0, again.output
    after = started(layout)
    assert {key for key in stale if after[key] != before[key]} == set(stale)  # every stale stage recomputed
    assert after[0, "bootstrap"] == before[0, "bootstrap"] and after[0, "rollout"] == before[0, "rollout"]
    assert stale_stages(layout.run_dir) == []
    listed = cli("runs")
    assert "recomputes them" not in listed.output, listed.output
