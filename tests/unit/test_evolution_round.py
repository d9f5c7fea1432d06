"""The evolution stages through the stage runner: signals over a ledger, one evolving round end to end
(with a scripted teacher and an oracle policy), the lineage join in DuckDB, caching, the round plan and
the exploration bootstrap of D_0."""

from __future__ import annotations

import json
import time

from coevolve.config import load_config
from coevolve.envs.base import Task
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.round_plan import EVOLUTION, round_plan
from coevolve.stages.signals.stage import SIGNALS
from coevolve.storage.catalog import query
from coevolve.storage.manifest import Manifest
from tests.conftest import CONFIGS, fake_context

LINEAGE_SQL = """
SELECT s.signal_id, s.kind, s.trajectory_id AS signal_trajectory, e.exploration_id, g.group_id,
       c.candidate_id, v.verification_id, v.outcome, t.task_id, later.trajectory_id AS later_trajectory
FROM signals s
JOIN explorations e ON e.signal_id = s.signal_id
JOIN (SELECT DISTINCT exploration_id, group_id FROM triples) g ON g.exploration_id = e.exploration_id
JOIN candidates c ON c.group_id = g.group_id
JOIN verifications v ON v.candidate_id = c.candidate_id
JOIN tasks t ON t.task_id = v.task_id AND t.source = 'synthesized'
LEFT JOIN trajectories later ON later.task_id = t.task_id AND later.source = 'verify'
WHERE json_extract_string(t.lineage, '$.signal_id') = s.signal_id
"""


def config(*overrides: str):
    return load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", "explore.rounds=1", *overrides])


# --- signals over a ledger ----------------------------------------------------------------------


def _write_rollout(ctx, round_: int, rewards: dict[str, list[float]]) -> None:
    trajectories, steps = [], []
    for task, values in rewards.items():
        for sample, reward in enumerate(values):
            tid = f"{task}-r{round_}-s{sample}"
            trajectories.append(
                {
                    "trajectory_id": tid,
                    "source": "rollout",
                    "task_id": task,
                    "group_id": f"{task}-{round_}",
                    "sample": sample,
                    "policy_version": "p",
                    "reward": reward,
                    "success": reward >= 0.5,
                    "finish": "done",
                    "error": None,
                    "num_turns": 1,
                    "num_steps": 1,
                    "num_tool_calls": 1,
                    "num_tool_errors": 0,
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "messages": "[]",
                    "eval_details": "{}",
                }
            )
            steps.append(
                {
                    "trajectory_id": tid,
                    "source": "rollout",
                    "task_id": task,
                    "step": 0,
                    "turn": 0,
                    "call_index": 0,
                    "kind": "call",
                    "tool": "get_balance",
                    "arguments": "{}",
                    "ok": True,
                    "observation": "",
                    "reply": "",
                }
            )
    manifest = Manifest("rollout", ctx.run, round_, f"key-{round_}", 1, started_at=time.time())
    manifest.artifacts["trajectories"] = ctx.store.write(round_, "rollout", "trajectories", trajectories)
    manifest.artifacts["steps"] = ctx.store.write(round_, "rollout", "steps", steps)
    ctx.store.write_manifest(manifest.finish())


def test_signals_stage_marks_every_round_since_the_last_evolution(tmp_path):
    from coevolve.flows.run_context import open_run

    ctx = open_run(
        config("evolve.every=2", "signals.kinds=[forgetting, boundary]"), "led", tmp_path, quiet=True
    )
    _write_rollout(ctx, 0, {"a": [1, 1], "b": [0, 0]})
    _write_rollout(ctx, 1, {"a": [0, 0], "c": [1, 0]})  # a forgotten, c on the boundary
    _write_rollout(ctx, 2, {"b": [1, 0]})  # b on the boundary
    record = run_stage(SIGNALS, ctx, 2)
    rows = ctx.store.read(2, "signals", "signals").to_pylist()
    got = sorted((r["kind"], r["trajectory_id"], r["trajectory_round"]) for r in rows)
    assert got == [
        ("boundary", "b-r2-s0", 2),
        ("boundary", "b-r2-s1", 2),
        ("boundary", "c-r1-s0", 1),
        ("boundary", "c-r1-s1", 1),
        ("forgetting", "a-r1-s0", 1),
        ("forgetting", "a-r1-s1", 1),
    ]
    assert record.manifest.outputs == {"signals": 6, "forgetting_signals": 2, "boundary_signals": 4}
    assert {r["round"] for r in rows} == {2}
    assert run_stage(SIGNALS, ctx, 2).cached
    artifact = ctx.store.layout.artifact_path(2, "signals", "signals")
    artifact.write_bytes(artifact.read_bytes()[:-20])  # truncated on disk: not a cache hit
    assert not run_stage(SIGNALS, ctx, 2).cached
    assert ctx.store.read(2, "signals", "signals").num_rows == 6
    _write_rollout(ctx, 1, {"a": [0, 0]})  # a changed ledger recomputes
    assert not run_stage(SIGNALS, ctx, 2).cached


def test_signals_stage_marks_tools_offered_but_never_called_when_asked(tmp_path, tokenizer):
    from coevolve import envs

    ctx = fake_context(config("signals.kinds=[rare]", "signals.rare_unused=true"), tmp_path, tokenizer)
    run_stage(BOOTSTRAP, ctx, 0)
    task = ctx.tasks(ctx.datasets.version_of(0).task_ids()[:1], 0)[0]
    _write_rollout(ctx, 0, {task.id: [1, 0]})  # both samples call get_balance only
    run_stage(SIGNALS, ctx, 0)
    rows = ctx.store.read(0, "signals", "signals").to_pylist()
    offered = {t["function"]["name"] for t in envs.make("toolworld", **ctx.config.env.options).reset(task).tools}
    assert {r["trajectory_id"] for r in rows} == {f"{task.id}-r0-s0", f"{task.id}-r0-s1"}
    patterns = json.loads(rows[0]["evidence"])["patterns"]
    assert {p["pattern"] for p in patterns} == offered - {"get_balance"} and {p["count"] for p in patterns} == {0}


# --- one evolving round -------------------------------------------------------------------------


def test_round_plan_runs_evolution_every_f_rounds():
    names = [s.name for s in round_plan(config("evolve.every=2"), 1)]
    assert names == [
        "rollout",
        "signals",
        "explore",
        "triples",
        "abstract",
        "verify",
        "merge",
        "grpo_update",
        "evaluate",
    ]
    assert "signals" not in [s.name for s in round_plan(config("evolve.every=2"), 0)]
    last = config("evolve.every=1", "evolve.last_round=1")
    assert ["signals" in [s.name for s in round_plan(last, r)] for r in range(3)] == [True, True, False]
    assert "signals" not in [s.name for s in round_plan(config("evolve.every=0"), 0)]


def test_verify_after_update_attempts_candidates_with_the_updated_policy(tmp_path, tokenizer):
    from coevolve.stages.grpo_update.stage import GRPO_UPDATE

    names = [s.name for s in round_plan(config("evolve.verify_after_update=true"), 0)]
    assert names[names.index("rollout") + 1 :] == ["grpo_update", *(s.name for s in EVOLUTION), "evaluate"]

    for after_update in (False, True):
        cfg = config(f"evolve.verify_after_update={str(after_update).lower()}")
        ctx = fake_context(cfg, tmp_path / str(after_update), tokenizer)
        for stage in (BOOTSTRAP, ROLLOUT, GRPO_UPDATE, *EVOLUTION):
            run_stage(stage, ctx, 0)
        attempts = ctx.store.read(0, "verify", "trajectories").column("policy_version").to_pylist()
        expected = ctx.policy_after(0 if after_update else -1)[0]
        assert attempts and set(attempts) == {expected}
        assert cfg.teacher.type == "policy" and ctx.teacher_version(ctx.evolution_policy_round(0)) == expected


def test_an_evolving_round_grows_the_dataset_with_lineage(tmp_path, tokenizer):
    ctx = fake_context(config(), tmp_path, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION):
        run_stage(stage, ctx, 0)
    outputs = {s.name: ctx.store.manifest(0, s.name).outputs for s in EVOLUTION}
    assert outputs["signals"]["boundary_signals"] > 0
    assert outputs["explore"]["contexts"] == outputs["explore"]["explorations"] > 0
    assert outputs["abstract"]["ok"] > 0
    assert outputs["merge"]["added_tasks"] > 0

    before, after = ctx.datasets.version_of(0).table, ctx.datasets.version_of(1).table
    assert ctx.datasets.source_of(1) == (0, "merge")
    assert after.num_rows == before.num_rows + outputs["merge"]["added_tasks"]
    assert set(before.column("task_id").to_pylist()) < set(after.column("task_id").to_pylist())
    assert set(after.column("dataset_version").to_pylist()) == {1}
    new_ids = [
        t for t in after.column("task_id").to_pylist() if t not in set(before.column("task_id").to_pylist())
    ]
    new = [Task.from_row(row) for row in ctx.datasets.version_of(1).task_rows(new_ids)]
    assert {t.source for t in new} == {"synthesized"} and all("final_state" in t.checker for t in new)
    assert all(
        {"signal_id", "exploration_id", "candidate_id", "verification_id"} <= set(t.lineage) for t in new
    )

    lineage = query(tmp_path, LINEAGE_SQL).to_pylist()
    assert {row["task_id"] for row in lineage} == set(new_ids)
    assert all(row["later_trajectory"] for row in lineage)

    # re-running the round recomputes nothing
    assert all(run_stage(stage, ctx, 0).cached for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION))


def test_unguided_exploration_ignores_the_signals(tmp_path, tokenizer):
    from coevolve.stages.explore.stage import EXPLORE

    ctx = fake_context(config("explore.guided=false", "explore.max_explorations=2"), tmp_path, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, SIGNALS, EXPLORE):
        run_stage(stage, ctx, 0)
    explorations = ctx.store.read(0, "explore", "explorations").to_pylist()
    assert len(explorations) == 2
    assert {x["kind"] for x in explorations} == {"unguided"} and all(
        x["signal_id"] is None for x in explorations
    )
    first = json.loads(ctx.store.read(0, "explore", "trajectories").to_pylist()[0]["messages"])
    assert first[1]["content"].startswith("Explore the tools")


def test_bootstrap_explores_to_extend_d0(tmp_path, tokenizer):
    """Round 0 runs the evolution stages unguided before the first rollout; bootstrap takes up to N tasks."""
    from coevolve.stages.round_plan import BOOTSTRAP_EVOLUTION

    cfg = config("dataset.max_tasks=3", "dataset.bootstrap_tasks=2", "dataset.bootstrap_worlds=3")
    assert [s.name for s in round_plan(cfg, 0)][:5] == [*(s.name for s in BOOTSTRAP_EVOLUTION), "bootstrap"]
    ctx = fake_context(cfg, tmp_path, tokenizer, solve="never")
    for stage in BOOTSTRAP_EVOLUTION:
        run_stage(stage, ctx, 0)
    record = run_stage(BOOTSTRAP, ctx, 0)
    out = record.manifest.outputs
    assert (out["seed_tasks"], out["synthesized_tasks"], out["dataset_size"]) == (3, 2, 5)
    explorations = ctx.store.read(0, "bootstrap-explore", "explorations").to_pylist()
    assert len(explorations) == 3 and {x["kind"] for x in explorations} == {"bootstrap"}
    assert all(x["signal_id"] is None for x in explorations)
    rows = [r for r in ctx.store.read(0, "bootstrap", "tasks").to_pylist() if r["source"] == "synthesized"]
    assert len(rows) == 2 and all("signal_id" not in json.loads(r["lineage"]) for r in rows)
    # unguided: the episodes opened with the generic request, not the seed task's own
    first = json.loads(ctx.store.read(0, "bootstrap-explore", "trajectories").to_pylist()[0]["messages"])
    assert first[1]["content"].startswith("Explore the tools")
