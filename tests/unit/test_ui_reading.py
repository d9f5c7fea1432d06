"""The web view read as a user reads it: fresh-task evaluations beside the initial policy's score, verdicts in
their own colours, zero-shot labels in a legend, the token pane opened on what was trained (log-probs and
advantage shown), the dataset a round without a merge before it trained on, every signal kind the run has
(an extension's too), and id prefixes as `coevolve show` takes them."""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from coevolve.benchmarks.ui_pages import RUN, filled, write_run
from coevolve.storage.catalog import EVALUATIONS_FOLDER
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import write_table
from coevolve.storage.store import RunStore
from coevolve.ui.app import create_app
from coevolve.ui.charts import VERDICT_COLOURS

SMALL = "small"
POLICY_LOGPROBS = [-0.25, -1.5, -0.125]


def write_small_run(root: Path) -> None:
    """Run `small`, rounds 0-2 with rollouts, D_0 (2 tasks) and D_1 (3 tasks, merged in round 0; no merge
    later); a group of two samples (rewards 1 and 0) of 4 masked + 3 policy + 1 masked tokens; trajectories
    `abc123`, `abd456`; an `unused` signal beside a boundary one."""
    store = RunStore(RunLayout(root, SMALL))
    mask = [0, 0, 0, 0, 1, 1, 1, 0]
    logprobs = [0.0] * 4 + POLICY_LOGPROBS + [0.0]
    stages: dict[tuple[int, str], dict] = {
        (0, "bootstrap"): {"datasets": filled("datasets", 2, {"run": SMALL, "round": 0, "task_id": ["t-0", "t-1"]})},
        (0, "merge"): {"datasets": filled("datasets", 3, {"run": SMALL, "round": 0, "dataset_version": 1,
                                                          "task_id": ["t-0", "t-1", "syn"]})},
        (0, "signals"): {"signals": filled("signals", 3, {
            "run": SMALL, "round": 0, "signal_id": ["s-b", "s-u", "s-u2"], "kind": ["boundary", "unused", "unused"],
            "task_id": "t-0", "trajectory_id": "abc123", "trajectory_round": 0, "evidence": "{}"})},
    }  # fmt: skip
    for r in range(3):
        ids = ["abc123", "abd456"] if r == 0 else [f"r{r}-a", f"r{r}-b"]
        stages[(r, "rollout")] = {
            "trajectories": filled("trajectories", 2, {"run": SMALL, "round": r, "trajectory_id": ids, "task_id": "t-0",
                                                       "source": "rollout", "reward": [1.0, 0.0], "messages": "[]"}),
            "samples": filled("samples", 2, {"run": SMALL, "round": r, "sample_id": ids, "trajectory_id": ids,
                                             "group_id": "g", "reward": [1.0, 0.0], "input_ids": [list(range(8))] * 2,
                                             "loss_mask": [mask] * 2, "logprobs": [logprobs] * 2})}  # fmt: skip
    for (r, stage), tables in stages.items():
        refs = {name: store.write(r, stage, name, table) for name, table in tables.items()}
        store.write_manifest(Manifest(stage, SMALL, r, f"key-{stage}", 1, refs, {}, started_at=time.time(), seconds=0.1))


def write_evaluation(root: Path, run: str, round_: int, success: float, key: str = "k1") -> None:
    """One `evaluations` row as `coevolve eval` files it (round -1: the initial policy)."""
    folder = root / EVALUATIONS_FOLDER / f"run={run}" / f"round={round_}" / f"stage=eval-{key}"
    write_table(filled("evaluations", 1, {
        "run": run, "round": round_, "env": "toolworld", "env_options": '{"seed": 9001}', "env_seed": 9001,
        "split": "validation", "tasks_key": key, "tasks": 8, "episodes": 8, "samples": 1, "success": success,
        "policy_version": "base-x" if round_ < 0 else f"r{round_}-x"}), folder / "evaluations.parquet")  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ui-reading")
    write_run(root, steps=400, rounds=2)
    write_small_run(root)
    write_evaluation(root, RUN, 1, 0.625)
    write_evaluation(root, RUN, -1, 0.25)
    return root


@pytest.fixture(scope="module")
def client(root) -> TestClient:
    return TestClient(create_app(root), base_url="http://127.0.0.1")


def chart_specs(page: str) -> dict[str, dict]:
    found = re.findall(r'<script type="application/json" class="chart-data">(.*?)</script>', page, re.S)
    return {spec["key"]: spec for spec in map(json.loads, found)}


def cells(page: str, table_id: str) -> list[list[str]]:
    """The visible text of each row's cells of `<table id=table_id>`."""
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S).group(1)
    return [[" ".join(html.unescape(re.sub(r"<[^>]+>", "", c)).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]  # fmt: skip


def test_the_run_page_shows_fresh_task_evaluations_beside_the_initial_policy(client):
    rows = [row for row in cells(client.get(f"/runs/{RUN}").text, "evaluations") if row]
    assert rows == [["after round 1 r1-x", "toolworld", "9001", "validation", "8", "62%", "25%"]]
    assert "coevolve eval --run small --env-seed 9001 --baseline" in html.unescape(client.get(f"/runs/{SMALL}").text)


def test_verdicts_have_their_own_colours_and_discards_are_never_green(client):
    page = client.get(f"/runs/{RUN}/verifications").text
    series = {s["label"]: s["colour"] for s in chart_specs(page)["outcomes"]["series"]}
    assert series == VERDICT_COLOURS and series["discard"] not in (series["accept"], "#2b8a3e")
    assert '<span class="verdict-discard">discard</span>' in page and '<span class="ok">discard' not in page
    assert '<span class="verdict-retain">retain</span>' in page


def test_two_runs_zero_shot_lines_are_named_in_the_legend_not_on_the_plot(client, root):
    store = RunStore(RunLayout(root, SMALL))
    ref = store.write(0, "baseline", "evals", filled("evals", 4, {"run": SMALL, "round": 0, "task_id": "h",
                                                                  "success": [True, False, False, False]}))  # fmt: skip
    store.write_manifest(Manifest("baseline", SMALL, 0, "key-b", 1, {"evals": ref}, {}, started_at=time.time(), seconds=0.1))
    fresh = TestClient(create_app(root), base_url="http://127.0.0.1")
    page = fresh.get(f"/?run={RUN}&run={SMALL}").text
    spec = chart_specs(page)["heldout_success"]
    [line] = spec["references"]
    colour = spec["series"][line["series"]]["colour"]
    assert f'<span class="swatch" style="border-top-color: {colour}"></span>dashed line: {SMALL} zero-shot 25%' in page
    script = (Path(__file__).parents[2] / "ui" / "static" / "charts.js").read_text()
    assert "fillText" not in script  # no label drawn over the lines and points


def test_the_token_pane_opens_on_the_trained_tokens_with_log_probs_and_advantage(client):
    page = client.get(f"/runs/{SMALL}/trajectories/abc123").text
    pane = page.split('id="tokens"', 1)[1]
    assert pane.index('<details class="collapsed"><summary>4 masked tokens before the first trained one') < pane.index(
        'id="first-trained"')  # fmt: skip
    assert '<a href="#first-trained">3 of 8, advantage +1.000' in page  # (1 - 0.5) / 0.5: its group's std
    logprobs = re.findall(r'<tr><td class="n">(\d+)</td><td class="text">id (\d+)</td><td class="n">([-\d.]+)</td></tr>', page)
    assert logprobs == [("4", "4", "-0.25"), ("5", "5", "-1.5"), ("6", "6", "-0.125")]
    other = client.get(f"/runs/{SMALL}/trajectories/abd456").text
    assert "advantage -1.000" in other


def test_the_last_round_shows_the_dataset_it_trained_on(client):
    rows = {row[0]: row for row in cells(client.get(f"/runs/{SMALL}").text, "rounds") if row}
    assert [rows[f"round {r}"][7] for r in range(3)] == ["2", "3", "3"]  # D_1 again in round 2: no merge since


def test_every_signal_kind_the_run_has_is_counted_and_charted(client):
    page = client.get(f"/runs/{SMALL}/signals").text
    series = {s["label"]: s["values"] for s in chart_specs(page)["signals"]["series"]}
    assert series == {"forgetting": [0], "boundary": [1], "rare": [0], "unused": [2]}
    assert cells(page, "signal-counts")[1] == ["round 0", "0", "1", "0", "2", "3", "1"]
    assert "<th>unused</th>" in page and '<option value="unused"' in page


def test_id_prefixes_lead_to_the_one_id_or_list_the_several(client):
    unique = client.get(f"/runs/{SMALL}/trajectories/abc", follow_redirects=False)
    assert unique.status_code == 302 and unique.headers["location"] == f"/runs/{SMALL}/trajectories/abc123"
    several = client.get(f"/runs/{SMALL}/trajectories/ab")
    assert several.status_code == 200 and re.findall(r'<li><a class="id" href="[^"]+">(\w+)</a>', several.text) == [
        "abc123", "abd456"]  # fmt: skip
    task = client.get(f"/runs/{RUN}/tasks/syn-1-", follow_redirects=False)
    assert task.status_code == 200 and "syn-1-0" in task.text and "syn-1-3" in task.text
    assert client.get(f"/runs/{SMALL}/tasks/t-", follow_redirects=False).headers["location"] == f"/runs/{SMALL}/tasks/t-0"
    assert client.get(f"/runs/{SMALL}/trajectories/zz").status_code == 404
