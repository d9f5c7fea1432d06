"""Weakness-signal rules on hand-made ledgers: each test is a short history and the rows it must mark."""

from __future__ import annotations

import json

import polars as pl
import pytest

from coevolve.core import content_hash
from coevolve.stages.signals.rules import SIGNALS_SCHEMA, extract_signals

STEP_COLUMNS = {"trajectory_id": pl.String, "tool": pl.String, "step": pl.Int32, "call_index": pl.Int32}


def ledger(*attempts: tuple[str, int, list[float]]) -> pl.DataFrame:
    """Trajectories from (task, round, rewards of its samples); ids are '<task>-r<round>-s<sample>'."""
    rows = [
        {"task_id": task, "round": rnd, "sample": i, "reward": float(r), "trajectory_id": f"{task}-r{rnd}-s{i}"}
        for task, rnd, rewards in attempts
        for i, r in enumerate(rewards)
    ]
    schema = {"task_id": pl.String, "round": pl.Int32, "sample": pl.Int32, "reward": pl.Float64,
              "trajectory_id": pl.String}
    return pl.DataFrame(rows, schema=schema)


def calls(uses: dict[str, list[str | None]]) -> pl.DataFrame:
    """Steps from {trajectory_id: tools in order}; None is a step without a call."""
    rows = [{"trajectory_id": tid, "tool": tool, "step": i, "call_index": 0}
            for tid, tools in uses.items() for i, tool in enumerate(tools)]
    return pl.DataFrame(rows, schema=STEP_COLUMNS)


NO_STEPS = pl.DataFrame(schema=STEP_COLUMNS)


def marked(signals: pl.DataFrame, kind: str) -> set[str]:
    return set(signals.filter(pl.col("kind") == kind)["trajectory_id"])


def evidence(signals: pl.DataFrame, kind: str) -> list[dict]:
    return [json.loads(e) for e in signals.filter(pl.col("kind") == kind)["evidence"]]


# --- forgetting ---------------------------------------------------------------------------------

def test_forgetting_marks_the_failed_trajectories_after_an_earlier_success():
    traj = ledger(("a", 0, [1, 1]), ("a", 1, [1, 0, 0, 0.5, 0]))
    out = extract_signals(traj, NO_STEPS, round=1, kinds=["forgetting"])
    assert marked(out, "forgetting") == {"a-r1-s1", "a-r1-s2", "a-r1-s4"}  # rewards 1 and 0.5 are successes
    assert evidence(out, "forgetting")[0] == {"score": 0.4, "best_score": 1.0, "best_round": 0, "attempts": 1,
                                              "scored_on": "success"}
    assert out["round"].to_list() == [1, 1, 1]


def test_first_attempt_ever_is_not_forgetting():
    traj = ledger(("a", 0, [0, 0]), ("b", 0, [1, 1]), ("b", 3, [1, 1]), ("c", 3, [0, 0]))
    assert extract_signals(traj, NO_STEPS, round=0, kinds=["forgetting"]).height == 0
    assert extract_signals(traj, NO_STEPS, round=3, kinds=["forgetting"]).height == 0


def test_an_earlier_score_of_exactly_half_counts_as_success():
    traj = ledger(("a", 0, [1, 0]), ("a", 1, [0, 0]))
    out = extract_signals(traj, NO_STEPS, round=1, kinds=["forgetting"])
    assert marked(out, "forgetting") == {"a-r1-s0", "a-r1-s1"}
    assert evidence(out, "forgetting")[0]["best_score"] == 0.5


def test_a_current_score_of_exactly_half_is_not_forgetting():
    traj = ledger(("a", 0, [1, 1]), ("a", 1, [1, 0]), ("b", 0, [1, 1]), ("b", 1, [0.5, 0.5]))
    assert extract_signals(traj, NO_STEPS, round=1, kinds=["forgetting"]).height == 0


def test_forgetting_window_edges():
    # success at round 0, then failures; with W = 3 round 0 is inside the window at r = 3, outside at r = 4
    traj = ledger(("a", 0, [1, 1]), *[("a", r, [0, 0]) for r in range(1, 5)])
    inside = extract_signals(traj, NO_STEPS, round=3, window=3, kinds=["forgetting"])
    outside = extract_signals(traj, NO_STEPS, round=4, window=3, kinds=["forgetting"])
    assert marked(inside, "forgetting") == {"a-r3-s0", "a-r3-s1"}
    assert evidence(inside, "forgetting")[0]["attempts"] == 3
    assert outside.height == 0


def test_forgetting_window_counts_attempted_rounds_not_calendar_rounds():
    # attempted at rounds 0, 5, 9 only; the other task keeps rounds 1-8 busy
    traj = ledger(("a", 0, [1, 1]), ("a", 5, [0, 0]), ("a", 9, [0, 0]), *[("b", r, [1, 1]) for r in range(10)])
    two = extract_signals(traj, NO_STEPS, round=9, window=2, kinds=["forgetting"])
    one = extract_signals(traj, NO_STEPS, round=9, window=1, kinds=["forgetting"])
    assert marked(two, "forgetting") == {"a-r9-s0", "a-r9-s1"}
    assert evidence(two, "forgetting")[0] == {"score": 0.0, "best_score": 1.0, "best_round": 0, "attempts": 2,
                                              "scored_on": "success"}
    assert one.height == 0


def test_forgetting_reports_the_most_recent_round_with_the_best_score():
    traj = ledger(("a", 0, [1, 1]), ("a", 1, [0.5, 0.5]), ("a", 2, [1, 1]), ("a", 3, [0, 1]), ("a", 4, [0, 0]))
    out = extract_signals(traj, NO_STEPS, round=4, kinds=["forgetting"])
    assert evidence(out, "forgetting")[0] == {"score": 0.0, "best_score": 1.0, "best_round": 2, "attempts": 4,
                                              "scored_on": "success"}


# --- boundary -----------------------------------------------------------------------------------

def test_boundary_marks_all_samples_of_a_mixed_group():
    traj = ledger(("a", 0, [1, 1]), ("a", 2, [1, 0, 0.5]))
    out = extract_signals(traj, NO_STEPS, round=2, kinds=["boundary"])
    assert marked(out, "boundary") == {"a-r2-s0", "a-r2-s1", "a-r2-s2"}
    assert evidence(out, "boundary")[0] == {"successes": 1, "failures": 1, "samples": 3, "mean": 0.5}


@pytest.mark.parametrize("rewards", [[1, 0.5], [0, 0.5], [1, 1], [0, 0], [0.5, 0.5]])
def test_boundary_needs_a_reward_strictly_on_each_side_of_half(rewards):
    traj = ledger(("a", 0, rewards))
    assert extract_signals(traj, NO_STEPS, round=0, kinds=["boundary"]).height == 0


def test_boundary_only_looks_at_round_r():
    traj = ledger(("a", 0, [1, 0]), ("a", 1, [1, 1]))
    assert extract_signals(traj, NO_STEPS, round=1, kinds=["boundary"]).height == 0


# --- rare ---------------------------------------------------------------------------------------

def rare_history(common: int, rare: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Round 0: task a's trajectory calls 'rare_tool' `rare` times, task b's calls 'common' `common` times."""
    traj = ledger(("a", 0, [1]), ("b", 0, [1]))
    return traj, calls({"a-r0-s0": ["rare_tool"] * rare, "b-r0-s0": ["common"] * common})


def test_rare_fires_just_below_theta_and_not_at_theta():
    at = extract_signals(*rare_history(common=95, rare=5), round=0, kinds=["rare"])  # 5 / 100 = theta / 100
    below = extract_signals(*rare_history(common=96, rare=5), round=0, kinds=["rare"])  # 5 / 101
    assert at.height == 0
    assert marked(below, "rare") == {"a-r0-s0"}
    assert evidence(below, "rare")[0] == {
        "pattern_kind": "tool", "total": 101, "first_round": -9,
        "patterns": [{"pattern": "rare_tool", "count": 5, "frequency": 5 / 101}],
    }


def test_rare_theta_zero_never_fires_and_steps_without_a_tool_are_not_actions():
    traj, steps = rare_history(common=19, rare=1)
    assert extract_signals(traj, steps, round=0, rare_theta=0, kinds=["rare"]).height == 0
    # with 80 non-call steps counted, 1 / 100 would be rare; only the 20 calls count: 1 / 20 = 5 %
    padded = pl.concat([steps, calls({"b-r0-s0": [None] * 80}).with_columns(step=pl.col("step") + 100)])
    assert extract_signals(traj, padded, round=0, kinds=["rare"]).height == 0


def test_rare_counts_only_the_window_and_patterns_with_count_zero_never_fire():
    # round 0 floods 'x' (outside a W = 2 window at r = 2); round 3 uses 'ghost' (later, ignored)
    traj = ledger(("a", 0, [1]), ("a", 1, [1]), ("a", 2, [1]), ("a", 3, [1]))
    steps = calls({"a-r0-s0": ["x"] * 100, "a-r1-s0": ["y"] * 9, "a-r2-s0": ["x", "y"], "a-r3-s0": ["ghost"]})
    narrow = extract_signals(traj, steps, round=2, window=2, rare_theta=20, kinds=["rare"])
    wide = extract_signals(traj, steps, round=2, window=3, rare_theta=20, kinds=["rare"])
    assert marked(narrow, "rare") == {"a-r2-s0"}
    patterns = evidence(narrow, "rare")[0]["patterns"]
    assert patterns == [{"pattern": "x", "count": 1, "frequency": 1 / 11}]  # no 'ghost', no count 0
    # with W = 3 round 0 counts: 'x' is 101 / 111, no longer rare, while 'y' (10 / 111 = 9 %) now is
    assert [p["pattern"] for p in evidence(wide, "rare")[0]["patterns"]] == ["y"]


def test_rare_marks_only_round_r_trajectories_with_all_their_rare_patterns():
    traj = ledger(("a", 0, [1]), ("b", 1, [1, 1]))
    steps = calls({"a-r0-s0": ["z"], "b-r1-s0": ["c"] * 40 + ["y"], "b-r1-s1": ["c"] * 40 + ["z", "y"]})
    out = extract_signals(traj, steps, round=1, kinds=["rare"])
    assert marked(out, "rare") == {"b-r1-s0", "b-r1-s1"}  # not a-r0-s0, though it uses rare 'z'
    per = {row["trajectory_id"]: json.loads(row["evidence"]) for row in out.iter_rows(named=True)}
    assert [p["pattern"] for p in per["b-r1-s1"]["patterns"]] == ["y", "z"]  # count 2 each, then by name
    assert per["b-r1-s1"]["total"] == 84


def test_offered_but_unused_tools_are_rare_only_when_asked_and_mark_the_trajectories_offered_them():
    # round 0: task a offers common and never_called; b offers common only; nobody calls never_called
    traj = ledger(("a", 0, [1, 0]), ("b", 0, [1]))
    steps = calls({"a-r0-s0": ["common"] * 10, "a-r0-s1": ["common"] * 10, "b-r0-s0": ["common"] * 10})
    offered = pl.DataFrame({"task_id": ["a", "a", "b"], "tool": ["common", "never_called", "common"]})
    assert extract_signals(traj, steps, round=0, kinds=["rare"]).height == 0  # the paper's rule: 0 < count
    assert extract_signals(traj, steps, round=0, kinds=["rare"], offered=offered).height == 0  # not asked
    out = extract_signals(traj, steps, round=0, kinds=["rare"], offered=offered, rare_unused=True)
    assert marked(out, "rare") == {"a-r0-s0", "a-r0-s1"}
    assert evidence(out, "rare")[0]["patterns"] == [{"pattern": "never_called", "count": 0, "frequency": 0.0}]
    assert evidence(out, "rare")[0]["total"] == 30
    with pytest.raises(ValueError, match="rare_pattern bigram"):
        extract_signals(traj, steps, round=0, kinds=["rare"], offered=offered, rare_pattern="bigram", rare_unused=True)


def test_unused_tools_and_rare_ones_share_one_row_per_trajectory():
    traj = ledger(("a", 0, [1]), ("b", 0, [1]))
    steps = calls({"a-r0-s0": ["rare_tool"] + ["common"] * 40, "b-r0-s0": ["common"] * 40})
    offered = pl.DataFrame({"task_id": ["a", "a", "a"], "tool": ["rare_tool", "common", "unused"]})
    out = extract_signals(traj, steps, round=0, kinds=["rare"], offered=offered, rare_unused=True)
    assert out["trajectory_id"].to_list() == ["a-r0-s0"]
    assert [p["pattern"] for p in evidence(out, "rare")[0]["patterns"]] == ["unused", "rare_tool"]


def test_rare_bigrams_follow_step_and_call_order_within_one_trajectory():
    traj = ledger(("a", 0, [1]), ("b", 0, [1]))
    steps = pl.DataFrame([
        ("a-r0-s0", "b", 1, 1), ("a-r0-s0", "a", 0, 0), ("a-r0-s0", "c", 1, 0), ("a-r0-s0", None, 2, 0),
        ("a-r0-s0", "a", 3, 0), ("b-r0-s0", "d", 0, 0),
        *[("b-r0-s0", "c" if i % 2 else "a", i, 0) for i in range(1, 61)],
    ], schema=STEP_COLUMNS, orient="row")
    # a: a, c, b, (no call), a -> a>c c>b b>a; b: d, c, a, c, a, ... -> d>c then 30 c>a and 29 a>c
    out = extract_signals(traj, steps, round=0, kinds=["rare"], rare_pattern="bigram")
    per = {row["trajectory_id"]: json.loads(row["evidence"]) for row in out.iter_rows(named=True)}
    assert per["a-r0-s0"]["total"] == 63
    assert [p["pattern"] for p in per["a-r0-s0"]["patterns"]] == ["b>a", "c>b"]
    assert [p["pattern"] for p in per["b-r0-s0"]["patterns"]] == ["d>c"]
    assert "a>d" not in json.dumps(per)  # no bigram across trajectories
    tools = extract_signals(traj, steps, round=0, kinds=["rare"])
    assert marked(tools, "rare") == {"a-r0-s0", "b-r0-s0"}  # 'b' and 'd' are rare tools


# --- the stage ----------------------------------------------------------------------------------

def mixed_history() -> tuple[pl.DataFrame, pl.DataFrame]:
    traj = ledger(("a", 0, [1, 1]), ("a", 1, [1, 0, 0]), ("b", 1, [1, 1, 1]))
    steps = calls({"a-r1-s0": ["common"] * 30, "b-r1-s2": ["rare_tool"]})
    return traj, steps


def test_disabled_kinds_produce_no_rows_of_that_kind():
    traj, steps = mixed_history()
    everything = extract_signals(traj, steps, round=1)
    assert set(everything["kind"]) == {"forgetting", "boundary", "rare"}
    for kinds in (["forgetting"], ["boundary", "rare"], ("rare",), "rare", []):
        out = extract_signals(traj, steps, round=1, kinds=kinds)
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        assert set(out["kind"]) == set(kinds)
        assert out.equals(everything.filter(pl.col("kind").is_in(kinds)))


def test_signal_ids_are_content_hashes_independent_of_row_order():
    traj, steps = mixed_history()
    out = extract_signals(traj, steps, round=1)
    shuffled = extract_signals(traj.reverse(), steps.reverse(), round=1)
    assert out.equals(shuffled)
    assert out["signal_id"].n_unique() == out.height  # a trajectory can carry several kinds, each its own id
    for row in out.iter_rows(named=True):
        key = {k: row[k] for k in ("kind", "round", "task_id", "trajectory_id")}
        assert row["signal_id"] == content_hash(key)


def test_rows_of_later_rounds_are_ignored():
    traj, steps = mixed_history()
    later = ledger(("a", 2, [0, 0]), ("b", 2, [1, 0]))
    more_steps = calls({"a-r2-s0": ["rare_tool"] * 30, "b-r2-s0": ["common"] * 1000})
    out = extract_signals(pl.concat([traj, later]), pl.concat([steps, more_steps]), round=1)
    assert out.equals(extract_signals(traj, steps, round=1))


def test_empty_inputs_give_an_empty_frame_with_the_schema():
    traj, steps = mixed_history()
    empty = extract_signals(traj.clear(), steps, round=1)
    assert empty.height == 0 and empty.schema == SIGNALS_SCHEMA
    no_steps = extract_signals(traj, NO_STEPS, round=1)
    assert no_steps.schema == SIGNALS_SCHEMA and set(no_steps["kind"]) == {"forgetting", "boundary"}
    nothing = extract_signals(traj, steps, round=7)
    assert nothing.height == 0 and nothing.schema == SIGNALS_SCHEMA
    assert extract_signals(traj, steps, round=1).schema == SIGNALS_SCHEMA


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"kinds": ["forgetting", "novelty"]}, "kinds"),
    ({"window": 0}, "window"),
    ({"rare_theta": -1.0}, "rare_theta"),
    ({"rare_pattern": "trigram"}, "rare_pattern"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    traj, steps = mixed_history()
    with pytest.raises(ValueError, match=field):
        extract_signals(traj, steps, round=1, **kwargs)


def test_missing_columns_are_reported():
    traj, steps = mixed_history()
    with pytest.raises(ValueError, match="trajectories: missing column"):
        extract_signals(traj.drop("reward"), steps, round=1)
    with pytest.raises(ValueError, match="steps: missing column"):
        extract_signals(traj, steps.drop("step"), round=1, rare_pattern="bigram")


# --- the stage's window: each marked round counts its own W rounds --------------------------------

def _stage_context(tmp_path, every: int, window: int):
    from coevolve.config import load_config
    from coevolve.flows.run_context import open_run
    from tests.conftest import CONFIGS

    config = load_config(CONFIGS / "test-tiny.yaml", [
        f"evolve.every={every}", f"signals.window={window}", "signals.kinds=[rare]", "explore.rounds=1"])
    return open_run(config, "window", tmp_path, quiet=True)


def _write_rollout(ctx, round_: int, uses: dict[str, list[str]]) -> None:
    """One rewarded trajectory per task of `uses` ('<task>-r<round>-s0'), calling its tools in order."""
    import time

    from coevolve.storage.manifest import Manifest

    trajectories, steps = [], []
    for task, tools in uses.items():
        tid = f"{task}-r{round_}-s0"
        trajectories.append({
            "trajectory_id": tid, "source": "rollout", "task_id": task, "group_id": f"{task}-{round_}",
            "sample": 0, "policy_version": "p", "reward": 1.0, "success": True, "finish": "done", "error": None,
            "num_turns": 1, "num_steps": len(tools), "num_tool_calls": len(tools), "num_tool_errors": 0,
            "prompt_tokens": 1, "completion_tokens": 1, "messages": "[]", "eval_details": "{}",
        })
        steps += [{"trajectory_id": tid, "source": "rollout", "task_id": task, "step": i, "turn": i,
                   "call_index": 0, "kind": "call", "tool": tool, "arguments": "{}", "ok": True,
                   "observation": "", "reply": ""} for i, tool in enumerate(tools)]
    manifest = Manifest("rollout", ctx.run, round_, f"key-{round_}", 1, started_at=time.time())
    manifest.artifacts["trajectories"] = ctx.store.write(round_, "rollout", "trajectories", trajectories)
    manifest.artifacts["steps"] = ctx.store.write(round_, "rollout", "steps", steps)
    ctx.store.write_manifest(manifest.finish())


def _rare_rows(ctx, round_: int) -> dict[str, tuple[int, int, int, list[str]]]:
    """{trajectory_id: (trajectory_round, N, first_round, rare patterns)} of the stage's rare signals."""
    rows = ctx.store.read(round_, "signals", "signals").to_pylist()
    out = {}
    for row in rows:
        ev = json.loads(row["evidence"])
        out[row["trajectory_id"]] = (row["trajectory_round"], ev["total"], ev["first_round"],
                                     [p["pattern"] for p in ev["patterns"]])
    return out


def test_stage_counts_each_marked_round_over_its_own_window_when_f_exceeds_w(tmp_path):
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.signals.stage import SIGNALS

    # F = 3, W = 2, evolution at r = 5: marked rounds 3, 4, 5 count rounds 2-3, 3-4, 4-5
    ctx = _stage_context(tmp_path, every=3, window=2)
    _write_rollout(ctx, 0, {"z": ["rare_tool"] * 90})
    _write_rollout(ctx, 1, {"c": ["y"] * 50})  # outside every marked round's window
    _write_rollout(ctx, 2, {"b": ["common"] * 40})  # only round 3's window: not in the last W rounds
    _write_rollout(ctx, 3, {"a": ["rare_tool", "common"]})
    _write_rollout(ctx, 4, {"d": ["common"] * 20 + ["y"]})
    _write_rollout(ctx, 5, {"e": ["common"] * 10})
    assert SIGNALS.reads["steps"].rounds(ctx, 5) == [2, 3, 4, 5]
    run_stage(SIGNALS, ctx, 5)
    # round 3: rare_tool 1 / 42 (with round 2 unloaded, N = 2 and rare_tool 1 / 2 was not rare);
    # round 4: y 1 / 23, N counting round 3's 2 calls (21 without them)
    assert _rare_rows(ctx, 5) == {"a-r3-s0": (3, 42, 2, ["rare_tool"]), "d-r4-s0": (4, 23, 3, ["y"])}
    assert run_stage(SIGNALS, ctx, 5).cached
    _write_rollout(ctx, 2, {"b": ["common"] * 41})  # a round only round 3 reads is part of the key
    assert not run_stage(SIGNALS, ctx, 5).cached
    assert _rare_rows(ctx, 5)["a-r3-s0"][1] == 43


def test_stage_n_of_the_earliest_marked_round_is_its_whole_window_when_f_equals_w(tmp_path):
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.signals.stage import SIGNALS

    # the paper's F = W = 10, evolution at r = 19: round 10 counts rounds 1-10, 30 calls each, plus one rare
    ctx = _stage_context(tmp_path, every=10, window=10)
    for r in range(20):
        _write_rollout(ctx, r, {"t": ["common"] * 30 + (["rare_tool"] if r == 10 else [])})
    assert SIGNALS.reads["steps"].rounds(ctx, 19) == list(range(1, 20))
    run_stage(SIGNALS, ctx, 19)
    assert _rare_rows(ctx, 19) == {"t-r10-s0": (10, 10 * 30 + 1, 1, ["rare_tool"])}  # 31 with the last W only
