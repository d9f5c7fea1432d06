"""`coevolve bench explore-yield`: the Wilson interval, the threshold, and one round of the real stage logic on
the coverage config's validation worlds with a scripted teacher, counted from its Parquet rows."""

from __future__ import annotations

import json

import pytest

from coevolve import envs
from coevolve.benchmarks.explore_yield.links import link_counts, threshold_met, wilson_interval
from coevolve.benchmarks.explore_yield.record import read_rows, write_record
from coevolve.benchmarks.explore_yield.run import measure_round
from coevolve.benchmarks.explore_yield.targets import CONTROL_KIND, build_aims
from coevolve.config import load_config
from coevolve.core import ToolCall
from tests.fakes.teacher import ScriptedTeacher

CONFIG = "configs/coverage-smollm2.yaml"
TWO_FAMILIES = ["env.options.gap_families=[contact_email, deposit_funds]", "verify.attempts=1"]


def test_wilson_interval_has_the_textbook_values():
    assert wilson_interval(0, 0) is None
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and round(high, 4) == 0.2775
    low, high = wilson_interval(10, 10)
    assert round(low, 4) == 0.7225 and high == 1.0
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)


def _row(family: str, tool: str, called: bool, admitted: list[str], round_: int = 0) -> dict:
    candidates = [{"candidate_id": task, "status": "ok", "query": "q", "tools": [tool], "calls_gap_tool": True,
                   "verdict": "accept", "reason": "executed", "task_id": task} for task in admitted]  # fmt: skip
    return {"round": round_, "gap_family": family, "gap_tool": tool, "called_gap_tool": called,
            "candidates": candidates}  # fmt: skip


def test_the_threshold_needs_half_the_calls_and_an_admitted_task_of_every_family_in_every_round():
    families = ["contact_email", "deposit_funds"]
    met = [_row("contact_email", "get_contact", True, ["t1"]), _row("deposit_funds", "deposit", True, ["t2"]),
           _row("contact_email", "get_contact", False, []), _row("deposit_funds", "deposit", False, [])]  # fmt: skip
    assert threshold_met(link_counts(met, families)) == (True, [])
    # one fewer call: 1 of 4 explorations call their tool
    fewer = [_row("contact_email", "get_contact", True, ["t1"]), _row("deposit_funds", "deposit", False, ["t2"]),
             *met[2:]]  # fmt: skip
    ok, failed = threshold_met(link_counts(fewer, families))
    assert not ok and failed == ["(a) 1 of 4 explorations called their named gap tool (needs >= 50%)"]
    # every call made, but deposit_funds admits nothing in round 1
    later = [
        *met,
        _row("contact_email", "get_contact", True, ["t3"], 1),
        _row("deposit_funds", "deposit", True, [], 1),
    ]
    counts = link_counts(later, families)
    assert counts["admitted_per_family"] == {"contact_email": [1, 1], "deposit_funds": [1, 0]}
    ok, failed = threshold_met(counts)
    assert not ok and failed == [
        "(c) deposit_funds: [1, 0] admitted tasks by round (needs >= 1 in every round)"
    ]


@pytest.fixture(scope="module")
def coverage():
    config = load_config(CONFIG, TWO_FAMILIES)
    make_env = lambda: envs.make(config.env.name, **config.env.options)  # noqa: E731
    return config, make_env, make_env().tasks("validation")


def test_targets_name_their_gap_tool_only_outside_the_control(coverage):
    config, make_env, validation = coverage
    named = build_aims(make_env, validation, config.gap_families, per_tool=2, named=True)
    control = build_aims(make_env, validation, config.gap_families, per_tool=2, named=False)
    assert [(a.tool, a.family) for a in named] == [("get_contact", "contact_email")] * 2 + [
        ("deposit", "deposit_funds")
    ] * 2
    assert [a.target.task.id for a in named] == [a.target.task.id for a in control]  # the same worlds
    families = ["contact_email", "delete_message", "deposit_funds", "product_price", "withdraw_funds"]
    every = build_aims(make_env, validation, families, per_tool=3, named=True)
    assert len({a.target.task.id for a in every}) == len(every)  # the explorer keys instructions by world
    for aim in named:
        assert aim.target.kind == "unused" and json.loads(aim.target.evidence)["tool"] == aim.tool
        assert aim.tool in {t["function"]["name"] for t in make_env().reset(aim.target.task).tools}
        call, answer = aim.target.steps
        assert call["tool"] == aim.listing and call["ok"] and answer["kind"] == "answer"
        assert aim.tool not in json.dumps(aim.target.steps)  # the trajectory never calls it
    assert {a.target.kind for a in control} == {CONTROL_KIND}
    assert all("get_contact" not in a.target.evidence and "deposit" not in a.target.evidence for a in control)


def test_a_round_counts_the_explorations_that_call_their_tool_and_the_verdicts_of_what_they_made(
        coverage, tokenizer, tmp_path, monkeypatch):  # fmt: skip
    config, make_env, validation = coverage
    aims = build_aims(make_env, validation, config.gap_families, per_tool=1, named=True)
    contact = next(a for a in aims if a.tool == "get_contact")
    name = json.loads(contact.target.steps[0]["observation"])[0]["name"]
    # the scripted explorer answers the contact world's request by calling get_contact; in the deposit
    # world it only calls tools that need no argument, so it never calls deposit
    scripted = contact.target.task.model_copy(
        update={"solution": [[ToolCall(name="get_contact", arguments={"name": name})]]}
    )
    teacher = ScriptedTeacher(tokenizer, [scripted])
    rows = measure_round(teacher, teacher, config, make_env, aims)

    by_tool = {row["gap_tool"]: row for row in rows}
    assert (
        by_tool["get_contact"]["called_gap_tool"]
        and "get_contact" in by_tool["get_contact"]["tools_called_ok"]
    )
    assert not by_tool["deposit"]["called_gap_tool"] and by_tool["deposit"]["named_tool"] == "deposit"
    assert by_tool["deposit"]["gap_tool_errors"] == [] and by_tool["deposit"]["replies"] > 0  # never tried it
    aimed = [c for c in by_tool["get_contact"]["candidates"] if c["status"] == "ok" and c["calls_gap_tool"]]
    assert aimed, "the abstraction of the get_contact call gives a candidate calling it"
    for c in (c for row in rows for c in row["candidates"] if c["status"] == "ok"):
        assert c["verdict"] in ("accept", "retain", "discard") and c["reason"]
        assert (c["task_id"] is not None) == (c["verdict"] in config.merge.admit)
    counts = link_counts(rows, config.gap_families)
    assert counts["call"] == (1, 2)
    assert counts["pass"] == (sum(c["task_id"] is not None for c in aimed), len(aimed))
    assert counts["admitted_per_family"]["deposit_funds"] == [0]

    monkeypatch.setenv("COEVOLVE_BENCH_RESULTS", str(tmp_path))
    row = write_record(rows, config.gap_families, teacher="scripted", variant="unused", command="coevolve bench x",
                       out=tmp_path / "out")  # fmt: skip
    stored = read_rows(tmp_path / "out" / "explorations.parquet")
    assert link_counts(stored, config.gap_families) == counts
    (line,) = (tmp_path / "explore-yield.jsonl").read_text().splitlines()
    assert json.loads(line)["figures"] == row["figures"]
    assert row["variant"] == "scripted, unused" and row["figures"]["threshold met"]["value"] == 0
    called = row["figures"]["(a) explorations calling the named gap tool"]
    assert called["value"] == 50.0 and called["interval"] == [9.45312, 90.5469]
    page = (tmp_path / "out" / "report.md").read_text()
    assert "**Threshold not met.**" in page and "(c) deposit_funds: [0] admitted tasks by round" in page


def test_the_named_tool_reaches_the_context_only_when_the_signal_names_it(coverage, tokenizer):
    config, make_env, validation = coverage
    config = config.model_copy(update={"explore": config.explore.model_copy(update={"named_tool_context": True})})
    teacher = ScriptedTeacher(tokenizer, [])
    named = measure_round(teacher, teacher, config, make_env,
                          build_aims(make_env, validation, config.gap_families, per_tool=1, named=True))  # fmt: skip
    control = measure_round(teacher, teacher, config, make_env,
                            build_aims(make_env, validation, config.gap_families, per_tool=1, named=False))  # fmt: skip
    for row in named:
        assert row["named_tool"] == row["gap_tool"] and row["gap_tool"] in row["tools_in_context"]
    for row in control:
        assert row["named_tool"] is None and row["gap_tool"] not in row["tools_in_context"]
