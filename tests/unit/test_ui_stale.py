"""The web view marks stale stages: after a stage re-run, the runs list, the run page and the round page say
which stages read something rewritten since they ran and why, and label the rounds whose figures come
from them; once those stages are computed again, nothing is marked.

The run is tests/unit/stale_run.py's: a tiny synthetic run whose manifests record what each stage read,
and a rollout re-run that writes round 0's trajectories again through `RunStore` with other rows and a new
manifest (the real `coevolve stage rollout` needs a model: minutes). A second run, written by
`benchmarks.ui_pages.write_run` with no such records, is never called stale.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from coevolve.benchmarks.ui_pages import RUN, write_run
from coevolve.storage.layout import RunLayout
from coevolve.ui.app import create_app
from tests.unit.stale_run import ONE, STALE_AFTER_RERUN, record_reads, rerun_rollout, write_recorded_run

STALE_STAGES = [stage for stage, _, _ in STALE_AFTER_RERUN]


def visible(fragment: str) -> str:
    """The text a reader sees: tags dropped, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def table(page: str, table_id: str) -> list[str]:
    """The visible text of each row of `<table id="table_id">`."""
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert found, f"no table {table_id!r} on the page"
    return [visible(row) for row in re.findall(r"<tr.*?</tr>", found.group(1), re.S)]


@pytest.fixture
def runs(tmp_path: Path):
    store = write_recorded_run(tmp_path)
    write_run(tmp_path, steps=80, rounds=1)
    return store, TestClient(create_app(tmp_path), base_url="http://127.0.0.1")


def test_a_rollout_re_run_marks_its_readers_stale_on_the_run_page_with_why(runs):
    store, client = runs
    assert "stale" not in visible(client.get(f"/runs/{ONE}").text).replace("stale stage", "")
    rerun_rollout(store)  # the next request sees it: stale is read from the manifests, not the cached catalog
    page = client.get(f"/runs/{ONE}").text
    assert table(page, "stale-stages")[1:] == [f"round {r} {stage} {why}" for stage, r, why in STALE_AFTER_RERUN]
    note = visible(page[page.index('id="stale"'):page.index('<table id="stale-stages">')])
    assert "3 stale stages" in note and f"coevolve run --run {ONE} recomputes every one of them" in note
    round_0 = table(page, "rounds")[1]
    assert round_0.startswith(f"round 0 stale from stale {', '.join(STALE_STAGES)} 4 0%")  # the re-run's 0 of 4
    assert "The points of round 0 come from stale stages." in visible(page)


def test_the_round_page_marks_each_stale_stage_and_says_why(runs):
    store, client = runs
    rerun_rollout(store)
    rows = {row.split()[0]: row for row in table(client.get(f"/runs/{ONE}/rounds/0").text, "stages")[1:]}
    for stage, _, why in STALE_AFTER_RERUN:
        assert rows[stage].startswith(f"{stage} stale {why} computed"), rows[stage]
    fresh = set(rows) - set(STALE_STAGES)
    assert fresh == {"bootstrap", "baseline", "rollout", "abstract", "verify", "merge"}
    assert not [rows[stage] for stage in fresh if "stale" in rows[stage]]


def test_the_runs_list_counts_a_runs_stale_stages_with_the_first_reason(runs):
    store, client = runs
    rerun_rollout(store)
    rows = {row.split()[0]: row for row in table(client.get("/").text, "runs")[1:]}
    stage, round_, why = STALE_AFTER_RERUN[0]
    assert rows[ONE].endswith(f"3 stale from round {round_} ({stage}: {why}); coevolve run --run {ONE} recomputes them")
    assert rows[RUN].endswith(" none")  # manifests without a record of their reads are never stale


def test_stages_computed_again_are_no_longer_marked(runs):
    store, client = runs
    rerun_rollout(store)
    record_reads(store)  # signals, update and evaluation recomputed: they read what the rollout holds now
    for url in (f"/runs/{ONE}", f"/runs/{ONE}/rounds/0"):
        assert 'class="badge stale"' not in client.get(url).text
    assert table(client.get("/").text, "runs")[1:][0].endswith(" none")


def test_a_run_whose_manifest_is_unreadable_is_named_and_the_others_still_listed(runs):
    store, client = runs
    rerun_rollout(store)
    bad = RunLayout(store.layout.root, RUN).manifest_path(0, "rollout")
    bad.write_text("[1, 2]")
    rows = {row.split()[0]: row for row in table(client.get("/").text, "runs")[1:]}
    assert f"unreadable: {bad} is not a stage manifest" in rows[RUN]
    assert "3 stale" in rows[ONE]
