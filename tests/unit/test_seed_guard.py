"""D_0 leaves out a seed task that is a twin of a task the run is evaluated on (the contamination guard's
solution and query rules): the tool world's generator can draw one request into two splits. A sample
without a twin is the same as before the guard."""

from __future__ import annotations

from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.verify.contamination import HeldOut
from coevolve.storage.datasets import seed_sample
from tests.conftest import CONFIGS


def bootstrap(tmp_path, config: str):
    cfg = load_config(CONFIGS / config)
    ctx = open_run(cfg, "guard", tmp_path, quiet=True)
    manifest = run_stage(BOOTSTRAP, ctx, 0).manifest
    return cfg, ctx, manifest


def test_a_seed_task_twin_of_an_evaluation_task_is_left_out_of_d0_and_named(tmp_path):
    cfg, ctx, manifest = bootstrap(tmp_path, "toolworld-smollm2.yaml")  # all 200 train tasks, 2 twins of test
    evaluated = HeldOut.of(ctx.env_tasks("test"))
    seeds = ctx.env_tasks("train")
    twins = [t for t in seeds if evaluated.near_duplicate(t, cfg.verify.contamination_jaccard)]
    assert len(twins) == 2  # what the guard finds in the shipped tool world today
    left_out = manifest.outputs["seed_twins_left_out"]
    assert [line.split(":")[0] for line in left_out] == [t.id for t in twins]
    assert all("near-duplicate of held-out task" in line for line in left_out)
    assert manifest.outputs["seed_tasks"] == len(seeds) - 2
    d0 = {row["task_id"] for row in ctx.store.read(0, "bootstrap", "tasks").to_pylist()}
    assert not d0 & {t.id for t in twins}


def test_a_sample_without_a_twin_is_the_sample_it_was(tmp_path):
    cfg, ctx, manifest = bootstrap(tmp_path, "demo.yaml")
    sample = seed_sample(ctx.env_tasks("train"), cfg.dataset.max_tasks, cfg.d0_sample_seed)
    d0 = [row["task_id"] for row in ctx.store.read(0, "bootstrap", "tasks").to_pylist() if row["source"] == "seed"]
    assert d0 == [t.id for t in sample] and manifest.outputs["seed_twins_left_out"] == []
