"""The signal readings beside the paper configs' ones, on hand-built ledgers: forgetting scored on success or on
mean reward, rare counted over tasks (the seed's reading), and the `unused` kind (an extension)."""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest

from coevolve.config import ConfigError, load_config
from coevolve.core import content_hash
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.signals.rules import extract_signals
from coevolve.stages.signals.stage import SIGNALS
from tests.conftest import CONFIGS, fake_context
from tests.unit.test_evolution_round import _write_rollout, config
from tests.unit.test_signals import NO_STEPS, calls, evidence, ledger, marked

# --- forgetting: success rate or mean reward ------------------------------------------------------


def test_zero_one_rewards_give_the_same_forgetting_signals_either_way():
    """BFCL's rewards are 0 or 1: a round's success rate is its mean reward, so both scores mark the same."""
    traj = ledger(("a", 0, [1, 1, 0]), ("a", 1, [1, 0, 0]), ("a", 2, [0, 0, 0]), ("b", 0, [1, 0]),
                  ("b", 2, [0, 1]), ("c", 1, [1, 1]), ("c", 2, [0, 0]), ("d", 0, [0, 0]), ("d", 2, [0, 0]))
    for round_ in (1, 2):
        success = extract_signals(traj, NO_STEPS, round=round_, kinds=["forgetting"])
        mean = extract_signals(traj, NO_STEPS, round=round_, kinds=["forgetting"], forgetting_score="mean_reward")
        assert success.drop("evidence").equals(mean.drop("evidence"))
        strip = [{k: v for k, v in e.items() if k != "scored_on"} for e in evidence(success, "forgetting")]
        assert strip == [{k: v for k, v in e.items() if k != "scored_on"} for e in evidence(mean, "forgetting")]
    assert marked(extract_signals(traj, NO_STEPS, round=2, kinds=["forgetting"]), "forgetting") == {
        "a-r2-s0", "a-r2-s1", "a-r2-s2", "c-r2-s0", "c-r2-s1"}


def test_partial_credit_fires_on_mean_reward_but_not_on_success():
    """The issue's history: one round of rewards [1, .4, .4, .4] (mean .55, success rate .25), then zeros.
    By success the task was never solved in a round, so nothing was forgotten."""
    traj = ledger(("a", 0, [1, 0.4, 0.4, 0.4]), ("a", 1, [0, 0, 0, 0]))
    mean = extract_signals(traj, NO_STEPS, round=1, kinds=["forgetting"], forgetting_score="mean_reward")
    assert marked(mean, "forgetting") == {f"a-r1-s{i}" for i in range(4)}
    assert evidence(mean, "forgetting")[0]["best_score"] == pytest.approx(0.55)
    assert evidence(mean, "forgetting")[0]["scored_on"] == "mean_reward"
    assert extract_signals(traj, NO_STEPS, round=1, kinds=["forgetting"]).height == 0


def test_the_config_defaults_to_success_and_names_a_bad_score():
    assert load_config(CONFIGS / "test-tiny.yaml").signals.forgetting_score == "success"
    with pytest.raises(ConfigError, match="signals.forgetting_score"):
        load_config(CONFIGS / "test-tiny.yaml", ["signals.forgetting_score=median"])


# --- rare over tasks: the seed's reading ------------------------------------------------------------


def test_rare_task_marks_a_task_drawn_rarely_in_the_window_even_when_it_calls_a_common_tool():
    # 20 rounds, tasks 'common1' and 'common2' drawn every round, 'once' drawn at round 19 only; all call 'x'
    history = [(t, r, [1, 0]) for r in range(20) for t in ("common1", "common2")] + [("once", 19, [1, 0])]
    traj = ledger(*history)
    steps = calls({row["trajectory_id"]: ["x"] for row in traj.iter_rows(named=True)})
    by_tool = extract_signals(traj, steps, round=19, window=20, kinds=["rare"])
    assert by_tool.height == 0  # 'x' is every action
    by_task = extract_signals(traj, steps, round=19, window=20, kinds=["rare"], rare_pattern="task")
    assert marked(by_task, "rare") == {"once-r19-s0", "once-r19-s1"}
    ev = evidence(by_task, "rare")[0]
    assert ev["pattern_kind"] == "task" and ev["total"] == 82  # rollouts of the window
    assert ev["patterns"] == [{"pattern": "once", "count": 2, "frequency": 2 / 82}]
    # no steps needed, and a task of the window not drawn at round r is not marked
    assert extract_signals(traj, NO_STEPS, round=19, window=20, kinds=["rare"], rare_pattern="task").equals(by_task)
    assert extract_signals(traj, steps, round=18, window=20, kinds=["rare"], rare_pattern="task").height == 0


def test_rare_task_counts_only_the_window_and_stops_at_theta():
    # 'b' drawn at rounds 0 and 9; with W = 5 at r = 9 the window holds 'a' x5 and 'b' x1: 1/6 of the rollouts
    traj = ledger(*[("a", r, [1]) for r in range(5, 10)], ("b", 0, [1]), ("b", 9, [1]))
    below = extract_signals(traj, NO_STEPS, round=9, window=5, kinds=["rare"], rare_pattern="task", rare_theta=17)
    at = extract_signals(traj, NO_STEPS, round=9, window=5, kinds=["rare"], rare_pattern="task", rare_theta=100 / 6)
    assert marked(below, "rare") == {"b-r9-s0"} and at.height == 0
    wide = extract_signals(traj, NO_STEPS, round=9, window=10, kinds=["rare"], rare_pattern="task", rare_theta=17)
    assert wide.height == 0  # round 0 inside a 10-round window: 2 of 7 rollouts
    wide = extract_signals(traj, NO_STEPS, round=9, window=10, kinds=["rare"], rare_pattern="task", rare_theta=30)
    assert evidence(wide, "rare")[0]["patterns"][0]["count"] == 2


# --- unused: one signal per tool offered and never called --------------------------------------------


def test_unused_gives_one_signal_per_tool_on_the_first_trajectory_offered_it():
    traj = ledger(("a", 0, [1]), ("b", 2, [1, 0]), ("c", 2, [0, 1]))
    steps = calls({"a-r0-s0": ["old"], "b-r2-s0": ["common"], "b-r2-s1": ["common"], "c-r2-s0": [None]})
    offered = pl.DataFrame({"task_id": ["b", "b", "b", "c", "c", "c", "c"],
                            "tool": ["common", "gap", "old", "gap", "other", "common", "gap"]})
    out = extract_signals(traj, steps, round=2, window=3, kinds=["unused"], offered=offered)
    rows = {json.loads(r["evidence"])["tool"]: r for r in out.iter_rows(named=True)}
    assert set(rows) == {"gap", "other"}  # 'old' was called at round 0, inside the window; 'common' at round 2
    first = min(("b", "c"), key=lambda task: hashlib.sha256(f"gap\0{task}".encode()).hexdigest())
    assert rows["gap"]["trajectory_id"] == f"{first}-r2-s0" and rows["other"]["trajectory_id"] == "c-r2-s0"
    assert json.loads(rows["gap"]["evidence"]) == {"tool": "gap", "offered_trajectories": 4, "offered_tasks": 2,
                                                   "window_calls": 0, "first_round": 0}
    narrow = extract_signals(traj, steps, round=2, window=2, kinds=["unused"], offered=offered)
    assert {json.loads(e)["tool"] for e in narrow["evidence"]} == {"gap", "other", "old"}  # round 0 left out
    shuffled = extract_signals(traj.reverse(), steps.reverse(), round=2, window=3, kinds=["unused"],
                               offered=offered.reverse())
    assert out.equals(shuffled)


def test_unused_tools_spread_over_the_tasks_offering_them():
    """Exploration takes one signal per task: tools all pointing at one task would leave one explored."""
    tasks = [f"t{i}" for i in range(6)]
    traj = ledger(*[(t, 0, [1]) for t in tasks])
    offered = pl.DataFrame({"task_id": [t for t in tasks for _ in range(8)],
                            "tool": [f"g{j}" for _ in tasks for j in range(8)]})
    out = extract_signals(traj, NO_STEPS, round=0, kinds=["unused"], offered=offered)
    assert out.height == 8 and out["task_id"].n_unique() > 2


def test_unused_signal_ids_name_the_tool_so_one_trajectory_carries_several():
    traj = ledger(("a", 0, [1]))
    offered = pl.DataFrame({"task_id": ["a", "a"], "tool": ["t1", "t2"]})
    out = extract_signals(traj, NO_STEPS, round=0, kinds=["unused", "boundary"], offered=offered)
    assert out["trajectory_id"].to_list() == ["a-r0-s0", "a-r0-s0"] and out["signal_id"].n_unique() == 2
    for row in out.iter_rows(named=True):
        key = {"kind": "unused", "round": 0, "task_id": "a", "tool": json.loads(row["evidence"])["tool"],
               "trajectory_id": "a-r0-s0"}
        assert row["signal_id"] == content_hash(key)
    with pytest.raises(ValueError, match="kinds: unused needs the tools each task offers"):
        extract_signals(traj, NO_STEPS, round=0, kinds=["unused"])


def test_the_paper_configs_keep_the_paper_kinds_and_a_config_may_add_unused():
    for name in ("bfcl-qwen3-4b.yaml", "appworld-qwen3-4b.yaml"):
        signals = load_config(CONFIGS / name).signals
        assert signals.kinds == ("forgetting", "boundary", "rare") and signals.rare_pattern == "tool"
    assert load_config(CONFIGS / "test-tiny.yaml", ["signals.kinds=[unused, rare]"]).signals.kinds == ("unused", "rare")


def test_signals_stage_gives_each_unused_offered_tool_one_row(tmp_path, tokenizer):
    from coevolve import envs

    ctx = fake_context(config("signals.kinds=[unused]"), tmp_path, tokenizer)
    run_stage(BOOTSTRAP, ctx, 0)
    task = ctx.tasks(ctx.datasets.version_of(0).task_ids()[:1], 0)[0]
    _write_rollout(ctx, 0, {task.id: [1, 0]})  # both samples call get_balance only
    record = run_stage(SIGNALS, ctx, 0)
    rows = ctx.store.read(0, "signals", "signals").to_pylist()
    offered = {t["function"]["name"] for t in envs.make("toolworld", **ctx.config.env.options).reset(task).tools}
    assert sorted(json.loads(r["evidence"])["tool"] for r in rows) == sorted(offered - {"get_balance"})
    assert {r["trajectory_id"] for r in rows} == {f"{task.id}-r0-s0"}
    assert record.manifest.outputs["unused_signals"] == len(rows)
