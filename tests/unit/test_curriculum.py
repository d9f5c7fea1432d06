"""The oracle curriculum (the learning benchmark's ceiling, not CoEvolve): the signals choose the families,
the environment's generator draws fresh tasks of them, verification and merge treat them like any
candidate; no teacher is asked anything."""

from __future__ import annotations

import json

from coevolve.config import load_config
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.round_plan import EVOLUTION
from tests.conftest import CONFIGS, fake_context


def test_the_oracle_draws_fresh_tasks_of_the_signalled_families(tmp_path, tokenizer):
    cfg = load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", "evolve.curriculum=oracle",
                                                   "abstract.max_tasks_per_group=2"])  # fmt: skip
    ctx = fake_context(cfg, tmp_path, tokenizer)

    def no_teacher(ctx, policy_round):
        raise AssertionError("the oracle curriculum asked a teacher")

    ctx.teacher_factory = no_teacher
    for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION):
        run_stage(stage, ctx, 0)
    explorations = ctx.store.read(0, "explore", "explorations").to_pylist()
    signals = {s["task_id"] for s in ctx.store.read(0, "signals", "signals").to_pylist()}
    assert explorations and {x["status"] for x in explorations} == {"oracle"}
    assert {x["task_id"] for x in explorations} <= signals
    assert ctx.store.read(0, "explore", "trajectories").num_rows == 0  # nothing was explored
    families = {json.loads(x["task"])["family"] for x in explorations}
    candidates = ctx.store.read(0, "abstract", "candidates").to_pylist()
    assert candidates and {c["teacher"] for c in candidates} == {"oracle-curriculum"}
    assert {c["intent"] for c in candidates} <= families
    splits = {t.id for split in ("train", "test", "validation", "heldout-templates") for t in ctx.env_tasks(split)}
    assert not {c["task_id"] for c in candidates} & splits  # fresh: no task of any split
    verdicts = ctx.store.read(0, "verify", "verifications").to_pylist()
    assert verdicts and all(v["reason"].startswith("executed: the reference solution satisfies") for v in verdicts)
    admitted = sum(v["outcome"] != "discard" for v in verdicts)
    assert ctx.store.manifest(0, "merge").outputs["added_tasks"] == admitted


def test_a_synthesized_task_points_the_oracle_at_the_families_calling_its_tools():
    from coevolve import envs
    from coevolve.envs.base import family_tools, synthesized_family
    from coevolve.stages.explore.curriculum import oracle_candidates

    env = envs.make("toolworld")
    family = synthesized_family(["get_order", "get_order"])
    assert family == "synth:get_order" and family_tools(family) == ["get_order"] and family_tools("pay_order") is None
    drawn = env.fresh_tasks([family, "bank_balance"], 4, "s")
    assert [t.family for t in drawn] == ["order_status", "bank_balance"] * 2
    assert env.fresh_tasks(["synth:no_such_tool"], 2, "s") == []  # no family calls it: nothing to draw
    exploration = {"status": "oracle", "exploration_id": "x1", "context": json.dumps({"families": [family]})}
    rows = oracle_candidates(env, [exploration], per_target=2, stream="s")
    assert len(rows) == 2 and {r["intent"] for r in rows} == {"order_status"}


def test_the_gap_oracle_draws_the_gap_families_whatever_the_signals_mark(tmp_path, tokenizer):
    """`evolve.curriculum: oracle-gap` (the coverage experiment's ceiling): each exploration names one gap
    family, and the candidates are fresh tasks of those families, verified like any candidate."""
    gap = ["deposit_funds", "contact_email"]
    cfg = load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", "evolve.curriculum=oracle-gap",
                                                   f"env.options.gap_families=[{', '.join(gap)}]"])  # fmt: skip
    ctx = fake_context(cfg, tmp_path, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION):
        run_stage(stage, ctx, 0)
    explorations = ctx.store.read(0, "explore", "explorations").to_pylist()
    assert explorations and {f for x in explorations for f in json.loads(x["context"])["families"]} <= set(gap)
    candidates = ctx.store.read(0, "abstract", "candidates").to_pylist()
    assert candidates and {c["intent"] for c in candidates} <= set(gap)
    assert ctx.store.read(0, "verify", "verifications").num_rows == len({c["candidate_id"] for c in candidates})
