"""`make demo` is a CoEvolve run: its config evolves the data in round 0 and trains on what it admitted
in round 1, with a teacher built from the bundled model (no scripted teacher, no hard-coded tasks), and
the command prints the evolution report after the run. (What a real demo run did is recorded by
`coevolve bench demo`.)"""

from __future__ import annotations

import re

from coevolve.config import load_config
from coevolve.stages.round_plan import EVOLUTION, round_plan
from coevolve.stages.warm_start.build import with_warm_starts
from tests.conftest import CONFIGS, REPO


def test_make_demo_runs_the_demo_config_then_its_evolution_report():
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    assert [line.strip() for line in recipe.splitlines()] == [
        "$(BIN)/coevolve run configs/demo.yaml", "$(BIN)/coevolve evolution --run demo"]


def test_the_demo_evolves_in_round_0_and_draws_what_it_admitted_in_round_1():
    cfg = load_config(CONFIGS / "demo.yaml")
    assert cfg.run.name == "demo" and cfg.run.rounds == 2
    evolution = {stage.name for stage in EVOLUTION}
    assert evolution <= {stage.name for stage in round_plan(cfg, 0)}
    assert not evolution & {stage.name for stage in round_plan(cfg, 1)}
    assert cfg.rollout.newest_share > 0 and cfg.verify.enabled and cfg.evolve.curriculum == "teacher"


def test_the_demo_teacher_is_built_from_the_bundled_model():
    cfg = load_config(CONFIGS / "demo.yaml")
    assert cfg.model.name == "smollm2-135m" and cfg.env.name == "toolworld"
    named = with_warm_starts(cfg)
    assert named.teacher.type == "local" and named.teacher.model.startswith("warm-start/teacher-")
    assert named.model.name.startswith("warm-start/")


def test_the_demo_starts_are_shipped_so_a_first_run_merges_instead_of_training():
    from coevolve.stages.warm_start.adapters import shipped_adapter
    from coevolve.stages.warm_start.build import start_paths

    cfg = load_config(CONFIGS / "demo.yaml")
    starts = start_paths(cfg, with_warm_starts(cfg))
    assert len(starts) == 2 and cfg.warm_start.lora_rank > 0
    missing = [p.name for p in starts if shipped_adapter(p.name) is None]
    assert not missing, f"rebuild them: coevolve models warm-start configs/demo.yaml --rebuild --ship ({missing})"
