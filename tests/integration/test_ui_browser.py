"""`coevolve ui` as a person uses it: the command serves a real tiny evolving run (the `evolved_run`
fixture) beside a small synthetic run whose stored text is markup, and headless Chromium (Debian's
`chromium`, driven by Playwright; never a browser Playwright downloads) loads every page, checks what it
shows against the catalog (charts included: rounds on the axis, counts as bars, the zero-shot line), and
saves a screenshot of each. A one-round run (`tests.unit.test_ui.write_one_round_run`) is served too.

Screenshots go to the test's temporary folder, or to $COEVOLVE_UI_SCREENSHOTS (how docs/screenshots/ is
made: `COEVOLVE_UI_SCREENSHOTS=docs/screenshots .venv/bin/pytest tests/integration/test_ui_browser.py`).
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import httpx
import pytest

from coevolve.benchmarks.ui_pages import RUN as SYNTHETIC
from coevolve.benchmarks.ui_pages import write_run
from coevolve.storage.catalog import query
from tests.conftest import Spawned, free_port, venv_bin, wait_until
from tests.unit.test_ui import ONE, write_one_round_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (`apt-get install -y chromium`; .ci/run does)"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
HOSTILE = "<script>alert(1)</script></td> a reply with markup"


@pytest.fixture(scope="module")
def served(evolved_run, tmp_path_factory):
    """`coevolve ui` on a root holding the evolved run (a link: the view never writes) and a synthetic one."""
    root = tmp_path_factory.mktemp("ui-root")
    (root / f"run={evolved_run.run}").symlink_to(evolved_run.root / f"run={evolved_run.run}")
    write_run(root, steps=400, rounds=2, reply=HOSTILE)
    write_one_round_run(root)
    port = free_port()
    server = Spawned.start([venv_bin("coevolve"), "ui", "--root", str(root), "--port", str(port)],
                           root.parent / "ui.log", dict(os.environ))  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/static/charts.js", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, 60, "coevolve ui answering", watch=server, every=0.2)
        yield url, root, evolved_run
    finally:
        server.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1280, "height": 900})  # fmt: skip
        page = context.new_page()
        page.problems = []
        page.on("console", lambda m: page.problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: page.problems.append(str(e)))
        page.on("dialog", lambda d: (page.problems.append(f"dialog: {d.message}"), d.dismiss()))
        yield page
        context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("COEVOLVE_UI_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def visit(page, url: str, shots: Path, name: str, *, full: bool = False):
    page.goto(url)
    assert page.title() != "not found", page.inner_text("main")
    page.screenshot(path=str(shots / f"{name}.png"), full_page=full)
    assert not page.problems, page.problems
    return page


def one(root: Path, sql: str):
    return query(root, sql).to_pylist()[0]


def drawn_charts(page) -> dict[str, dict[str, str]]:
    """What charts.js recorded on each drawn chart, by key: kind, x_ticks, bars, references."""
    return page.evaluate("""Object.fromEntries([...document.querySelectorAll('figure.chart[data-drawn=true]')]
        .map((f) => [f.dataset.key, {kind: f.dataset.kind, x_ticks: f.dataset.xTicks, bars: f.dataset.bars,
                                     references: f.dataset.references}]))""")


def nonzero_counts(root: Path, run: str, view: str, column: str) -> int:
    """How many (round, value) bars a count chart has: the pairs with at least one row."""
    return one(root, f"SELECT count(*) AS n FROM (SELECT DISTINCT round, {column} FROM {view} WHERE run = '{run}')")["n"]


def test_runs_page_overlays_curves_of_every_run(served, browser, shots):
    url, root, evo = served
    page = visit(browser, url + "/", shots, "runs-overlaid", full=True)
    assert page.locator("figure.chart[data-drawn=true]").count() == 6
    assert page.locator(".u-legend").first.inner_text().count(evo.run) == 1
    assert SYNTHETIC in page.locator(".u-legend").first.inner_text()
    page = visit(browser, f"{url}/?run={evo.run}", shots, "runs")
    train = one(root, f"SELECT avg(success::INT) AS s FROM trajectories WHERE run = '{evo.run}' AND round = 1 "
                      "AND source = 'rollout'")["s"]  # fmt: skip
    assert f"{train:.0%}" in page.locator("#runs").inner_text()


def test_run_and_round_pages_show_rounds_and_stage_timings(served, browser, shots):
    url, root, evo = served
    page = visit(browser, f"{url}/runs/{evo.run}", shots, "run", full=True)
    assert page.locator("#rounds tr").count() == 3  # header + 2 rounds
    charts = drawn_charts(page)
    assert {c["x_ticks"] for k, c in charts.items() if k != "dataset_size"} == {"0,1"}  # whole rounds, no more
    assert charts["heldout_success"]["references"] == "1"
    zero_shot = one(root, f"SELECT avg(success::INT) AS s FROM evals WHERE run = '{evo.run}' AND stage = 'baseline'")
    assert f"dashed line: zero-shot {zero_shot['s']:.0%}" in page.inner_text("figure[data-key=heldout_success]")
    page = visit(browser, f"{url}/runs/{evo.run}/rounds/1", shots, "round")
    stages = page.locator("#stages").inner_text()
    for stage in ("rollout", "signals", "explore", "triples", "abstract", "verify", "merge", "grpo_update", "evaluate"):
        assert stage in stages
    update = one(root, f"SELECT loss FROM updates WHERE run = '{evo.run}' AND round = 1")
    assert f"loss: {update['loss']:.4g}" in stages
    episodes = one(root, f"SELECT count(*) AS n FROM trajectories WHERE run = '{evo.run}' AND round = 1")["n"]
    assert f"of {episodes}" in page.inner_text("main")


def test_trajectory_page_shows_the_conversation_calls_and_policy_tokens(served, browser, shots):
    url, root, evo = served
    t = one(root, f"""SELECT t.trajectory_id, t.reward, s.num_tokens, s.num_policy_tokens FROM trajectories t
                      JOIN samples s USING (run, round, trajectory_id) WHERE t.run = '{evo.run}' AND t.success
                      ORDER BY t.round, t.trajectory_id LIMIT 1""")  # fmt: skip
    page = visit(browser, f"{url}/runs/{evo.run}/trajectories/{t['trajectory_id']}", shots, "trajectory")
    assert f"{t['reward']:.4f}" in page.locator("#outcome").inner_text()
    assert page.locator("#messages .message.assistant").count() >= 1
    assert page.locator("#steps td", has_text="yes").count() >= 1
    assert f"{t['num_tokens']} tokens: {t['num_policy_tokens']} generated by the policy" in page.inner_text("#token-counts")
    policy_text = "".join(page.locator("#tokens .tok.policy").all_inner_texts())
    assert "<tool_call>" in policy_text  # decoded with the run's tokenizer: the policy wrote the call
    page.evaluate("document.getElementById('token-counts').scrollIntoView(); "
                  "const box = document.getElementById('tokens'); box.scrollTop = box.scrollHeight")
    page.screenshot(path=str(shots / "trajectory-tokens.png"))


def test_signals_lineage_and_verification_pages(served, browser, shots):
    url, root, evo = served
    task = one(root, f"""SELECT task_id, json_extract_string(lineage, '$.signal_id') AS signal_id,
                                json_extract_string(lineage, '$.verification_id') AS verification_id
                         FROM tasks WHERE run = '{evo.run}' AND source = 'synthesized' ORDER BY round LIMIT 1""")  # fmt: skip
    signals = one(root, f"SELECT count(*) AS n FROM signals WHERE run = '{evo.run}'")["n"]
    page = visit(browser, f"{url}/runs/{evo.run}/signals", shots, "signals")
    assert f"of {signals}" in page.inner_text("main")
    bars = drawn_charts(page)["signals"]
    assert bars["kind"] == "bars" and bars["bars"] == str(nonzero_counts(root, evo.run, "signals", "kind"))
    assert page.locator("#signals a", has_text=task["task_id"][:12]).count() == 1  # the task it led to
    page = visit(browser, f"{url}/runs/{evo.run}/tasks/{task['task_id']}", shots, "task-lineage", full=True)
    for link in ("signal", "exploration", "triples", "candidate", "verification"):
        assert page.locator(f"#link-{link}").is_visible()
    assert task["signal_id"] in page.inner_text("#link-signal")
    verdict = one(root, f"SELECT outcome FROM verifications WHERE verification_id = '{task['verification_id']}'")
    assert verdict["outcome"] in page.inner_text("#link-verification")
    page = visit(browser, f"{url}/runs/{evo.run}/verifications", shots, "verifications")
    bars = drawn_charts(page)["outcomes"]
    assert bars["kind"] == "bars" and bars["bars"] == str(nonzero_counts(root, evo.run, "verifications", "outcome"))
    page = visit(browser, f"{url}/runs/{evo.run}/tasks", shots, "tasks")
    assert task["task_id"][:12] in page.inner_text("#tasks")


def test_stored_markup_shows_as_text_in_the_browser(served, browser, shots):
    url = served[0]
    page = visit(browser, f"{url}/runs/{SYNTHETIC}/trajectories/r1-t2", shots, "markup-as-text")
    assert HOSTILE in page.inner_text("#messages")  # shown literally; the dialog handler saw no alert
    assert page.locator("#messages script").count() == 0
    assert page.locator("#steps tr").count() >= 2  # `</td>` in a result did not break the table


def test_a_one_round_run_is_charted_over_round_0_with_bars_and_the_baseline(served, browser, shots):
    url = served[0]
    charts = drawn_charts(visit(browser, f"{url}/runs/{ONE}", shots, "run-one-round", full=True))
    assert {k: c["x_ticks"] for k, c in charts.items()} == {
        "train_success": "0", "heldout_success": "0", "train_reward": "0", "dataset_size": "0,1"}  # fmt: skip
    assert charts["heldout_success"]["references"] == "1"
    page = visit(browser, f"{url}/runs/{ONE}/signals", shots, "signals-one-round", full=True)
    assert drawn_charts(page)["signals"] == {"kind": "bars", "x_ticks": "0", "bars": "2", "references": "0"}
    assert "0.587" in page.inner_text("#signals") and "starts before round 0" in page.inner_text("#signals")
    page = visit(browser, f"{url}/runs/{SYNTHETIC}/signals", shots, "signals-paged")
    assert page.inner_text(".pager >> nth=0") == "rows 1-50 of 80 next →"
