"""Cache keys cover exactly what a stage declares: a merge-only field recomputes merge and what follows,
never the teacher's stages; a forced re-run that writes the same rows leaves its dependents cached."""

from __future__ import annotations

from coevolve.config import load_config
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.grpo_update.stage import GRPO_UPDATE
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.round_plan import EVOLUTION, STAGES
from tests.conftest import CONFIGS, fake_context

TEACHER_STAGES = ("signals", "explore", "triples", "abstract", "verify")


def config(*overrides: str):
    return load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", "explore.rounds=1", *overrides])


def run_rounds(ctx, rounds: int) -> dict[tuple[int, str], bool]:
    """Round 0 (bootstrap, rollout, evolution, update) and the rollouts of later rounds: (round, stage) ->
    cached."""
    done = {}
    for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION, GRPO_UPDATE):
        done[0, stage.name] = run_stage(stage, ctx, 0).cached
    for round_ in range(1, rounds):
        done[round_, "rollout"] = run_stage(ROLLOUT, ctx, round_).cached
    return done


def test_a_merge_only_field_recomputes_merge_and_what_follows_not_the_teacher_stages(tmp_path, tokenizer):
    first = run_rounds(fake_context(config(), tmp_path, tokenizer), 2)
    assert not any(first.values())
    again = run_rounds(fake_context(config("merge.signal_weight=3.0"), tmp_path, tokenizer), 2)
    assert all(again[0, name] for name in ("bootstrap", "rollout", *TEACHER_STAGES, "grpo_update"))
    assert not again[0, "merge"]  # the new weights
    assert not again[1, "rollout"]  # drawn from the reweighted dataset


def test_a_forced_rerun_with_identical_rows_leaves_downstream_cached(tmp_path, tokenizer):
    ctx = fake_context(config(), tmp_path, tokenizer)
    run_rounds(ctx, 1)
    for name in ("rollout", "signals"):
        before = ctx.store.manifest(0, name).artifacts
        assert not run_stage(STAGES[name], ctx, 0, force=True).cached
        assert {k: a.sha256 for k, a in ctx.store.manifest(0, name).artifacts.items()} == {
            k: a.sha256 for k, a in before.items()}  # the same rows, byte for byte
        downstream = EVOLUTION[EVOLUTION.index(STAGES[name]) + 1:] if name != "rollout" else EVOLUTION
        assert all(run_stage(stage, ctx, 0).cached for stage in downstream)
        assert run_stage(GRPO_UPDATE, ctx, 0).cached


def test_stage_keys_name_the_config_fields_they_read():
    """Every declared config path exists; no stage hashes the whole `evolve`-style section of another."""
    cfg = config()
    for stage in STAGES.values():
        cfg.select(stage.config)  # raises KeyError on a path that does not exist
    assert STAGES["merge"].config == ("merge",)
    assert not any("merge" in path for name in TEACHER_STAGES for path in STAGES[name].config)
