"""One count, one meaning (`coevolve.contracts.counts`): the round line and `coevolve evolution` label a
round's candidates the same way, with verdicts per distinct solution (verification checks a solution's
wordings in turn, so its rows outnumber the solutions: the demo's 8 solutions gave 23 rows)."""

from __future__ import annotations

import re

from coevolve.contracts.counts import CandidateCounts
from coevolve.flows.evolution_report import candidate_lines
from coevolve.flows.summary import round_line, run_metrics
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.store import RunStore

DEMO_STATUSES = {"ok": 8, "duplicate": 18, "invalid": 5, "unparsable": 0}  # round 0 of `make demo`
DEMO_ROWS = {"accept": 1, "retain": 0, "discard": 22}
DEMO_LABEL = "31 candidates: 8 distinct solutions, 18 duplicates, 5 invalid -> 1 accept / 0 retain / 7 discard"


def test_verdicts_are_per_distinct_solution_and_every_count_is_labelled():
    counts = CandidateCounts.of(DEMO_STATUSES, DEMO_ROWS)
    assert (counts.candidates, counts.distinct, counts.discard, counts.wordings_checked) == (31, 8, 7, 23)
    assert counts.label() == DEMO_LABEL
    assert CandidateCounts.of(DEMO_STATUSES, None).label() == "31 candidates: 8 distinct solutions, 18 duplicates, 5 invalid"


def test_the_round_line_says_what_the_evolution_made_with_the_same_labels(tmp_path):
    layout = RunLayout(tmp_path, "r")
    outputs = {"rollout": {"success_rate": 0.5, "mean_reward": 0.5},
               "signals": {"forgetting_signals": 0, "boundary_signals": 12, "rare_signals": 5},
               "abstract": DEMO_STATUSES, "verify": DEMO_ROWS, "merge": {"added_tasks": 1, "dataset_size": 13}}  # fmt: skip
    for stage, out in outputs.items():
        Manifest(stage, "r", 0, "k", 1, outputs=out).write(layout.manifest_path(0, stage))
    (row,) = run_metrics(RunStore(layout), 1)
    assert f"signals 0/12/5 (f/b/r) -> {DEMO_LABEL} -> +1 tasks" in round_line(row)
    assert (row["candidates"], row["discard"], row["wordings_checked"]) == (31, 7, 23)  # tracking's numbers too


def test_the_round_line_counts_unused_signals_when_the_run_has_them(tmp_path):
    layout = RunLayout(tmp_path, "r")
    signals = {"forgetting_signals": 0, "boundary_signals": 2, "rare_signals": 1, "unused_signals": 7}
    Manifest("signals", "r", 0, "k", 1, outputs=signals).write(layout.manifest_path(0, "signals"))
    (row,) = run_metrics(RunStore(layout), 1)
    assert "signals 0/2/1/7 (f/b/r/u)" in round_line(row)
    assert row["unused_signals"] == 7


def test_the_evolution_report_counts_the_runs_candidates_as_the_round_line_does():
    def rows(sql: str) -> list[dict]:  # the catalog's answers for the demo's one evolving round
        found = DEMO_STATUSES if "FROM candidates" in sql else DEMO_ROWS
        return [{"k": k, "n": n} for k, n in found.items() if n]

    lines = candidate_lines(rows, verified=True)
    assert lines[0] == f"  candidates      {DEMO_LABEL}"
    assert lines[1].startswith("  verifications   23 wordings checked")


def test_the_web_view_counts_verdicts_per_distinct_solution(tmp_path):
    from starlette.testclient import TestClient

    from coevolve.ui.app import create_app
    from tests.unit.test_ui import ONE, write_one_round_run

    write_one_round_run(tmp_path)  # one solution: its first wording discarded, its duplicate accepted
    page = TestClient(create_app(tmp_path), base_url="http://127.0.0.1").get(f"/runs/{ONE}/verifications").text
    table = " ".join(re.sub(r"<[^>]+>", " ", page.split('id="outcome-counts"')[1].split("</table>")[0]).split())
    assert "candidates distinct solutions unparsable invalid duplicates accept retain discard wordings checked" in table
    assert "round 0 2 1 0 0 1 1 0 0 2" in table  # the solution was accepted, not also discarded
