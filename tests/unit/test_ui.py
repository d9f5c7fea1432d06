"""The web view (`coevolve ui`) over a small synthetic run: every page answers with the run's values,
stored markup is shown as text, tokens are split by loss mask, and nothing is written under the root.
A second, one-round run (`write_one_round_run`) holds what a reader must be shown plainly: a chart over a
single round, a zero-shot baseline, counts drawn as bars, evidence with long floats and a window before
round 0, and a `duplicate` candidate admitted in its twin's place.
The browser test on a real run is tests/integration/test_ui_browser.py."""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from coevolve.benchmarks.ui_pages import RUN, filled, pages, write_run
from coevolve.cli import app as cli
from coevolve.storage.catalog import query
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.store import RunStore
from coevolve.ui.app import create_app
from coevolve.ui.evidence import evidence_rows
from coevolve.ui.trajectory import token_spans

HOSTILE = "<script>alert(1)</script></td></table><b>bold?</b> {{ 7*7 }}"
ONE = "one-round"
LONG_MEAN = 0.5874999999999999
TWIN, STAND_IN = "cand-first-wording", "cand-second-wording"


def write_one_round_run(root: Path) -> None:
    """Run `one-round`: round 0 only. Zero-shot 1 of 4 held-out tasks solved, 2 of 4 after the update; a
    boundary signal (mean `LONG_MEAN`) and a rare one (10-round window, so `first_round` -9; one offered tool
    never called); candidate `TWIN` discarded by the checks and its `duplicate` `STAND_IN` accepted as `syn-a`."""
    store = RunStore(RunLayout(root, ONE))
    base = {"run": ONE, "round": 0}
    rare = {"pattern_kind": "tool", "total": 40, "first_round": -9,
            "patterns": [{"pattern": "delete_file", "count": 0, "frequency": 0.0},
                         {"pattern": "move_file", "count": 1, "frequency": 0.025}]}  # fmt: skip
    lineage = {"signal_id": "sig-boundary", "signal_kind": "boundary", "candidate_id": STAND_IN,
               "verification_id": "ver-stand-in"}  # fmt: skip
    stages = {
        "bootstrap": {"tasks": filled("tasks", 2, {**base, "task_id": ["t-0", "t-1"], "source": "seed", "turns": '["q"]'}),
                      "datasets": filled("datasets", 2, {**base, "task_id": ["t-0", "t-1"], "weight": 1.0})},
        "baseline": {"evals": filled("evals", 4, {**base, "task_id": "h", "success": [True, False, False, False]})},
        "rollout": {"trajectories": filled("trajectories", 4, {
            **base, "trajectory_id": [f"o-{i}" for i in range(4)], "source": "rollout", "task_id": "t-0",
            "reward": [1.0, 0.0, 0.9, 0.45], "success": [True, False, True, False], "messages": "[]"})},
        "signals": {"signals": filled("signals", 3, {
            **base, "signal_id": ["sig-boundary", "sig-boundary-2", "sig-rare"], "kind": ["boundary", "boundary", "rare"],
            "task_id": "t-0", "trajectory_id": ["o-0", "o-1", "o-2"], "trajectory_round": 0,
            "evidence": [json.dumps({"successes": 2, "failures": 2, "samples": 4, "mean": LONG_MEAN})] * 2
            + [json.dumps(rare)]})},
        "abstract": {"candidates": filled("candidates", 2, {
            **base, "candidate_id": [TWIN, STAND_IN], "status": ["ok", "duplicate"], "duplicate_of": [None, TWIN],
            "reason": [None, f"near-duplicate of {TWIN}"], "query": "Move notes.txt into archive/", "solution": "[]"})},
        "verify": {"verifications": filled("verifications", 2, {
            **base, "verification_id": ["ver-twin", "ver-stand-in"], "candidate_id": [TWIN, STAND_IN],
            "outcome": ["discard", "accept"], "reason": ["checks: the reference solution changes nothing", "executed"],
            "task_id": [None, "syn-a"]})},
        "merge": {"tasks": filled("tasks", 1, {**base, "task_id": "syn-a", "source": "synthesized", "split": "synthesized",
                                               "turns": '["Move notes.txt into archive/"]', "lineage": json.dumps(lineage)}),
                  "datasets": filled("datasets", 3, {**base, "dataset_version": 1, "task_id": ["t-0", "t-1", "syn-a"]})},
        "evaluate": {"evals": filled("evals", 4, {**base, "task_id": "h", "success": [True, True, False, False]})},
    }  # fmt: skip
    for stage, tables in stages.items():
        refs = {name: store.write(0, stage, name, table) for name, table in tables.items()}
        store.write_manifest(Manifest(stage, ONE, 0, f"key-{stage}", 1, refs, {}, started_at=time.time(), seconds=0.1))


def chart_specs(page: str) -> dict[str, dict]:
    """The chart specs a page hands to charts.js, by chart key."""
    found = re.findall(r'<script type="application/json" class="chart-data">(.*?)</script>', page, re.S)
    return {spec["key"]: spec for spec in map(json.loads, found)}


def text_of(page: str, css_class: str) -> list[str]:
    """The visible text of every `<div class="css_class">` of the page, tags dropped, spaces collapsed."""
    blocks = re.findall(rf'<div class="{css_class}">(.*?)</div>', page, re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", b)).split()) for b in blocks]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ui")
    write_run(root, steps=800, rounds=2, reply=HOSTILE)
    write_one_round_run(root)
    return root


@pytest.fixture(scope="module")
def client(root) -> TestClient:
    return TestClient(create_app(root), base_url="http://127.0.0.1")


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_every_page_answers_with_the_runs_values(client, root):
    for name, url in pages(2).items():
        response = client.get(url)
        assert response.status_code == 200, (name, response.text[:500])
    train = query(root, f"SELECT avg(success::INT) AS s FROM trajectories WHERE run = '{RUN}' AND round = 1").column("s")[0]
    assert f"{train.as_py():.0%}" in client.get(f"/runs/{RUN}").text
    lineage = client.get(f"/runs/{RUN}/tasks/syn-1-1").text
    for link in ("s1-1", "e1-1", "c1-1", "accept", "synthesized"):  # signal, exploration, candidate, verdict
        assert link in lineage
    outcomes = client.get(f"/runs/{RUN}/verifications?outcome=discard").text
    assert "rows 1-2 of 2" in outcomes  # one discard in each of 2 rounds


def test_pages_are_paged_and_filtered_in_sql(client):
    first, second = client.get(f"/runs/{RUN}/rounds/1?source=rollout").text, client.get(f"/runs/{RUN}/rounds/1?page=1").text
    assert "rows 1-50 of 100" in first and "rows 51-100 of 100" in second
    rare = client.get(f"/runs/{RUN}/signals?kind=rare").text
    assert "rows 1-20 of 20" in rare  # 10 rare signals per round


def test_stored_markup_is_shown_as_text(client):
    shown = html.escape(HOSTILE, quote=False)
    for url in (f"/runs/{RUN}/trajectories/r1-t3", f"/runs/{RUN}/tasks/syn-0-0", f"/runs/{RUN}/verifications",
                f"/runs/{RUN}/tasks"):  # fmt: skip
        page = client.get(url).text
        assert HOSTILE not in page and "<script>alert" not in page, url
        assert shown in page.replace("&#39;", "'").replace("&#34;", '"'), url
        assert "{{ 7*7 }}" in page and ">49<" not in page  # stored text is data, never a template


def test_tokens_are_split_by_loss_mask(client):
    assert token_spans([5, 6, 7, 8, 9], [0, 0, 1, 1, 0]) == [(0, 2, False), (2, 4, True), (4, 5, False)]
    assert token_spans([], []) == []
    page = client.get(f"/runs/{RUN}/trajectories/r1-t3").text
    assert "600 tokens: <b>80</b> generated by the policy" in page  # the synthetic mask: 500 + 40 + 20 + 40
    assert "[40 policy tokens]" in page  # no tokenizer saved with this run: lengths, honestly


def test_the_view_never_writes_under_the_root(root):
    before = tree(root)
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    for url in pages(2).values():
        client.get(url)
    assert tree(root) == before and not (root / "catalog.duckdb").exists()


def test_unknown_runs_and_ids_are_404_and_an_empty_root_says_how_to_start(client, tmp_path):
    assert client.get("/runs/nope").status_code == 404
    assert client.get(f"/runs/{RUN}/trajectories/nope").status_code == 404
    assert client.get(f"/runs/{RUN}/rounds/99").status_code == 404
    assert client.get("/runs/..%2F..%2Fetc").status_code == 404
    empty = TestClient(create_app(tmp_path), base_url="http://127.0.0.1").get("/")
    assert empty.status_code == 200 and "coevolve run configs/test-tiny.yaml" in empty.text


def test_the_command_refuses_a_missing_root(tmp_path):
    result = CliRunner().invoke(cli, ["ui", "--root", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no storage root" in result.output


def test_a_single_round_is_charted_over_that_round_and_counts_as_bars(client):
    charts = chart_specs(client.get(f"/runs/{ONE}").text)
    drawn = {key: spec for key, spec in charts.items() if spec["x"]}
    assert {"train_success", "heldout_success", "dataset_size"} <= drawn.keys()
    assert all(spec["x"] == [0] and spec["kind"] == "lines" for key, spec in drawn.items() if key != "dataset_size")
    sizes = charts["dataset_size"]  # D_0 (seed tasks) and D_1, trained on from round 1
    assert (sizes["x"], sizes["y"], sizes["series"][0]["values"]) == ([0, 1], "count", [2.0, 3.0])
    assert charts["heldout_success"]["y"] == "fraction" and charts["heldout_success"]["series"][0]["values"] == [0.5]
    signals = chart_specs(client.get(f"/runs/{ONE}/signals").text)["signals"]
    assert (signals["kind"], signals["y"], signals["x"]) == ("bars", "count", [0])
    assert {s["label"]: s["values"] for s in signals["series"]} == {"forgetting": [0], "boundary": [2], "rare": [1]}
    verdicts = chart_specs(client.get(f"/runs/{RUN}/verifications").text)["outcomes"]
    assert verdicts["kind"] == "bars" and verdicts["x"] == [0, 1]
    assert {s["label"]: s["values"] for s in verdicts["series"]} == {"accept": [2, 2], "retain": [1, 1], "discard": [1, 1]}


def test_the_held_out_chart_draws_the_zero_shot_baseline(client):
    page = client.get(f"/runs/{ONE}").text
    heldout = chart_specs(page)["heldout_success"]
    assert heldout["references"] == [{"label": "zero-shot 25%", "value": 0.25, "series": 0}]
    assert "dashed line: zero-shot 25%, held-out success of the initial policy before any training" in page
    overlaid = chart_specs(client.get(f"/?run={RUN}&run={ONE}").text)["heldout_success"]
    index = [s["label"] for s in overlaid["series"]].index(ONE)  # the synthetic run has no baseline
    assert overlaid["references"] == [{"label": f"{ONE} zero-shot 25%", "value": 0.25, "series": index}]


def test_the_pager_label_stands_apart_from_its_links(client):
    first = text_of(client.get(f"/runs/{RUN}/rounds/1").text, "pager")
    assert first[0] == "rows 1-50 of 100 next →"
    assert text_of(client.get(f"/runs/{RUN}/rounds/1?page=1").text, "pager")[0] == "rows 51-100 of 100 ← previous"


def test_evidence_reads_as_a_table_with_rounded_numbers_and_words_for_sentinels(client):
    page = html.unescape(client.get(f"/runs/{ONE}/signals").text)
    assert str(LONG_MEAN) not in page and "<th>mean</th><td>0.587</td>" in page
    main = page.split("<main>", 1)[1]  # the header names the storage root, a temporary folder like pytest-91
    assert '"first_round"' not in main and "-9" not in main
    assert "the 10-round window starts before round 0: every round so far counts" in page
    assert "delete_file: never called in the window (the task offers it)" in page
    assert "move_file: 1 (2.5% of N)" in page
    lineage = html.unescape(client.get(f"/runs/{ONE}/tasks/syn-a").text)
    assert "<th>mean</th><td>0.587</td>" in lineage and str(LONG_MEAN) not in lineage
    forgetting = {"score": 0.1234567, "best_score": 1.0, "best_round": 3, "attempts": 2}
    assert [r["value"] for r in evidence_rows("forgetting", forgetting, 5)] == ["0.123", "1", "3", "2"]
    assert evidence_rows("rare", "not json", 0)[0]["value"] == "not json"


def test_an_admitted_duplicate_is_shown_as_the_wording_that_stood_in_for_its_twin(client):
    page = html.unescape(client.get(f"/runs/{ONE}/tasks/syn-a").text)
    assert "(duplicate)" not in page
    assert f"{STAND_IN}</span> (<span class=\"status\">stood in for {TWIN}" in page
    assert f"duplicates, <span class=\"id\">{TWIN}</span>: discard, <span class=\"text\">checks: the reference" in page
    listing = html.unescape(client.get(f"/runs/{ONE}/verifications?outcome=accept").text)
    assert f"stood in for {TWIN}: the same solution, verified in its place" in listing
