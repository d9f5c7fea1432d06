"""Inspecting a real evolving run (the shared `evolved_run`: test-tiny.yaml, evolve.every=1, 2 rounds):
every SQL example of docs/sql.md runs, the documented column types are the views' types, `coevolve show`
renders tasks and trajectories from id prefixes, `coevolve runs` is right, each round published its
Prefect artifacts, and the notebook executes headless."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections import Counter

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from tests.conftest import REPO

pytestmark = pytest.mark.slow

SQL_DOC = REPO / "docs" / "sql.md"


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", SQL_DOC.read_text(), flags=re.DOTALL)


def show(root, *args: str) -> str:
    result = CliRunner().invoke(app, ["show", *args, "--root", str(root)], terminal_width=160)
    assert result.exit_code == 0, result.output
    return result.output


def shortest_unique_prefix(ids: list[str], target: str) -> str:
    for n in range(1, len(target) + 1):
        if sum(i.startswith(target[:n]) for i in ids) == 1:
            return target[:n]
    return target


def test_every_sql_example_runs_and_returns_rows(evolved_run):
    from coevolve.storage.catalog import query

    blocks = sql_blocks()
    assert len(blocks) >= 7
    for sql in blocks:
        assert query(evolved_run.root, sql).num_rows > 0, sql


def test_documented_column_types_are_the_view_types(evolved_run, tmp_path):
    from coevolve.benchmarks.ui_pages import filled
    from coevolve.storage.catalog import connect
    from coevolve.storage.parquet import write_table

    documented = re.findall(r"### `(\w+)`\n\n\| column .*?\n\|---.*?\n((?:\|.*\n?)+)", SQL_DOC.read_text())
    root = shutil.copytree(evolved_run.root, tmp_path / "runs")  # with an evaluation beside the run
    write_table(filled("evaluations", 1, {"run": "evo", "round": -1}),
                root / "evaluations" / "run=evo" / "round=-1" / "stage=eval-k" / "evaluations.parquet")
    con = connect(root)
    for view, table in documented:
        actual = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {view})").fetchall())
        doc = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", table, flags=re.MULTILINE))
        assert doc == actual, view


def test_show_task_renders_turns_solution_lineage_and_success(evolved_run):
    from coevolve.storage.catalog import query

    root = evolved_run.root
    tasks = query(root, "SELECT task_id, source, turns, lineage FROM tasks").to_pylist()
    synthesized = next(t for t in tasks if t["source"] == "synthesized")
    prefix = shortest_unique_prefix([t["task_id"] for t in tasks], synthesized["task_id"])
    out = show(root, "task", prefix)
    lineage = json.loads(synthesized["lineage"])
    assert synthesized["task_id"] in out and "synthesized" in out
    assert json.loads(synthesized["turns"])[0][:40] in " ".join(out.split())
    assert "solution" in out and "checker" in out
    assert lineage["signal_id"] in out and lineage["verification_id"] in out
    assert "success per round" in out and "verify" in out


def test_show_trajectory_renders_messages_steps_reward_and_task(evolved_run):
    from coevolve.storage.catalog import query

    root = evolved_run.root
    ids = [r["trajectory_id"] for r in query(root, "SELECT trajectory_id FROM trajectories").to_pylist()]
    row = query(root, "SELECT t.*, s.tool FROM trajectories t JOIN steps s USING (run, trajectory_id) "
                      "WHERE t.source = 'rollout' AND s.kind = 'call' LIMIT 1").to_pylist()[0]
    out = show(root, "trajectory", shortest_unique_prefix(ids, row["trajectory_id"]))
    assert row["trajectory_id"] in out and row["task_id"] in out
    assert "user:" in out and "assistant:" in out and "tool:" in out
    assert row["tool"] in out and f"reward {row['reward']:.3f}" in out and row["finish"] in out
    assert "coevolve show task" in out


def test_show_task_of_a_heldout_task_lists_its_episodes(evolved_run):
    from coevolve.storage.catalog import query

    task_id = query(evolved_run.root, "SELECT task_id FROM evals LIMIT 1").to_pylist()[0]["task_id"]
    out = show(evolved_run.root, "task", task_id)
    assert "in no dataset of run 'evo'" in " ".join(out.split())
    assert "baseline" in out and "evaluate" in out and "eval:test" in out


def test_show_ambiguous_and_unknown_prefixes(evolved_run):
    runner = CliRunner()
    root = str(evolved_run.root)
    ambiguous = runner.invoke(app, ["show", "task", "", "--root", root])
    assert ambiguous.exit_code == 2 and "matches several tasks" in ambiguous.output
    unknown = runner.invoke(app, ["show", "trajectory", "zzzz", "--root", root])
    assert unknown.exit_code == 2 and "no trajectory id starts with 'zzzz'" in unknown.output


def test_runs_lists_rounds_dataset_size_and_success(evolved_run):
    from coevolve.flows.summary import runs_overview
    from coevolve.storage.catalog import query

    root = evolved_run.root
    [row] = runs_overview(root)
    size = query(root, "SELECT count(*) AS n FROM datasets WHERE dataset_version = 2").to_pylist()[0]["n"]
    train = query(root, "SELECT avg(success::INT) AS s FROM trajectories "
                        "WHERE source = 'rollout' AND round = 1").to_pylist()[0]["s"]
    heldout = query(root, "SELECT avg(success::INT) AS s FROM evals "
                          "WHERE stage = 'evaluate' AND round = 1").to_pylist()[0]["s"]
    assert row == {"run": "evo", "rounds": 2, "dataset": size, "train": f"{train:.0%}",
                   "held-out": f"test {heldout:.0%}", "eval round": 1, "fresh-task eval": None}
    result = CliRunner().invoke(app, ["runs", "--root", str(root)], terminal_width=160)
    assert result.exit_code == 0 and "evo" in result.output and str(size) in result.output


def test_each_round_published_prefect_artifacts(evolved_run):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["evo-rounds"])))
        summaries = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["evo-summary"])))
    # one version per round from each flow run of a run named evo (test_compare computes one again)
    assert found and set(Counter(a.flow_run_id for a in found).values()) == {2}
    assert set(Counter(a.flow_run_id for a in summaries).values()) == {2}
    latest = max(found, key=lambda a: a.created)
    rows = json.loads(latest.data) if isinstance(latest.data, str) else latest.data
    assert [r["round"] for r in rows] == [0, 1]
    for key in ("train_success", "train_reward", "boundary_signals", "candidates_ok", "accept", "retain",
                "discard", "dataset_size", "loss", "kl", "eval_test_success"):
        assert key in rows[1], key
    assert rows[1]["dataset_size"] > rows[0]["dataset_size"] - rows[0]["added_tasks"]
    assert any("| train_success |" in s.data for s in summaries)


def test_notebook_executes_headless(evolved_run, monkeypatch, tmp_path):
    """As `make notebook` runs it: its four figures saved (FIGURES), each chart's round axis in whole rounds."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("COEVOLVE_HOME", str(evolved_run.root))
    monkeypatch.setenv("RUN", evolved_run.run)
    monkeypatch.setenv("FIGURES", str(tmp_path / "figures"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend returns the figures
    nb = nbformat.read(REPO / "notebooks" / "explore_run.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "run 'evo'" in text and "-> verification:" in text and "coevolve show task" in text
    saved = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert saved == ["dataset.png", "signals.png", "success.png", "verification.png"]


def test_evolution_report_follows_an_admitted_task_back_to_its_signal(evolved_run):
    from coevolve.storage.catalog import query

    result = CliRunner().invoke(app, ["evolution", "--run", evolved_run.run, "--root", str(evolved_run.root)],
                                terminal_width=2000)  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.output
    assert "signals" in out and "boundary" in out and "verifications" in out and "accept" in out
    assert "one admitted task" in out and "verdict   accept" in out
    printed = shlex.split(next(line for line in out.splitlines() if "coevolve sql" in line))
    assert printed[:4] == ["coevolve", "sql", "--root", str(evolved_run.root)]  # pasted, it finds the run
    [row] = query(evolved_run.root, printed[4]).to_pylist()  # the printed query runs as printed
    assert row["kind"] in {"forgetting", "boundary", "rare"} and row["outcome"] in {"accept", "retain"}
