"""`coevolve eval`: a finished run's policy on tasks of another environment seed, none of the run's own,
written outside the run as the `evaluations` artifact the catalog and `coevolve runs` show, with progress on
stderr; `--baseline` scores the initial policy on the same tasks, also when the round's checkpoint is pruned;
bad arguments are one line."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from coevolve import envs
from coevolve.cli import app
from coevolve.config import load_config
from coevolve.storage.layout import RunLayout
from coevolve.storage.store import RunStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_root(evolved_run, tmp_path_factory):
    """A copy of the shared evolved run (its root is read-only for tests)."""
    root = tmp_path_factory.mktemp("reevaluate") / "runs"
    shutil.copytree(evolved_run.root, root)
    return root


def folders(root, round_="*"):
    return sorted((root / "evaluations" / "run=evo").glob(f"round={round_}/stage=eval-*"))


def evaluate_in(root, *args: str):
    """`coevolve eval --run evo --env-seed 9001 ARGS` under `root`: the result, the folder it wrote, its
    summary and its `evals` rows."""
    result = CliRunner().invoke(app, ["eval", "--run", "evo", "--env-seed", "9001", *args, "--root", str(root)])
    assert result.exit_code == 0, result.output
    [folder] = folders(root)
    summary = json.loads((folder / "evaluation.json").read_text())
    return result, folder, summary, pq.read_table(folder / "evals.parquet").to_pylist()


def test_eval_scores_the_last_policy_on_tasks_the_run_never_met(run_root):
    result, folder, summary, evals = evaluate_in(run_root, "--split", "validation", "--split", "heldout-templates")
    update = RunStore(RunLayout(run_root, "evo")).completed(1, "grpo_update")

    assert summary["round"] == 1 and summary["policy_version"] == update.outputs["policy_version"]
    assert summary["options"]["seed"] == 9001 and summary["tasks"] == {"validation": 8, "heldout-templates": 8}
    cfg = load_config(run_root / "run=evo" / "config.yaml")
    own = envs.make(cfg.env.name, **cfg.env.options)
    own_ids = {task.id for split in own.splits() for task in own.tasks(split)}
    assert evals and not {row["task_id"] for row in evals} & own_ids
    for split, success in summary["success"].items():
        rows = [row for row in evals if row["split"] == split]
        assert success == sum(row["success"] for row in rows) / len(rows)
    assert {row["policy_version"] for row in evals} == {summary["policy_version"]}
    assert "validation: success" in result.output and str(folder) in result.output
    assert not (run_root / "run=evo" / "evaluations").exists()  # nothing written into the run
    assert "eval policy after round 1: 16 episodes on fresh tasks of validation, heldout-templates" in result.stderr
    assert "eval policy after round 1: 16/16 episodes" in result.stderr  # progress, apart from the results


@pytest.mark.parametrize(("args", "message"), [
    (["--env-seed", "0"], "that run 'evo' has not met; choose another seed"),
    (["--env-seed", "9001", "--round", "7"], "no completed grpo_update in round 7"),
    (["--env-seed", "9001", "--split", "nope"], "has no split 'nope'"),
    (["--env-seed", "9001", "--max-tasks", "0"], "--max-tasks must be >= 1"),
    (["--split", "validation"], "--env-seed: give a seed of toolworld"),
    (["--env", "bfcl"], "--split: name the splits of bfcl"),
    (["--env", "nowhere", "--split", "test"], "--env: no environment 'nowhere'"),
    (["--env", "bfcl", "--split", "validation"], "environment 'bfcl' has no split 'validation'"),
])  # fmt: skip
def test_bad_arguments_are_one_line(run_root, args, message):
    result = CliRunner().invoke(app, ["eval", "--run", "evo", *args, "--root", str(run_root)])
    assert result.exit_code == 2 and message in result.output, result.output


def test_an_unknown_run_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["eval", "--run", "ghost", "--env-seed", "1", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "no run 'ghost'" in result.output


def test_a_warm_starts_tasks_count_as_the_runs_own(tmp_path):
    from coevolve.flows.reevaluate import warm_start_tasks

    (tmp_path / "warm_start.json").write_text(json.dumps({"base_model": "smollm2-135m", "task_ids": ["a1", "b2"]}))
    assert warm_start_tasks(str(tmp_path)) == {"a1", "b2"}
    assert warm_start_tasks("tiny-random-llama") == set()  # a model name, not a warm start


def test_sampled_episodes_per_task_score_each_task_by_their_mean(evolved_run, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(evolved_run.root, root)
    config_path = root / "run=evo" / "config.yaml"
    cfg = load_config(config_path, ["eval.greedy=false", "eval.samples=3"])
    config_path.write_text(cfg.to_yaml())

    result, _, summary, evals = evaluate_in(root, "--split", "validation", "--max-tasks", "4")
    assert summary["samples"] == 3 and not summary["greedy"] and summary["tasks"] == {"validation": 4}
    assert len(evals) == 12 and all(n == 3 for n in Counter(row["task_id"] for row in evals).values())
    assert summary["success"]["validation"] == sum(row["success"] for row in evals) / 12
    assert "of 4 tasks, 3 sampled episodes each" in result.output


def test_a_tool_world_policy_is_scored_on_bfcl(tmp_path, evolved_run):
    """The paper's transfer row: a run trained on one environment, scored on another one's split with that
    environment's own checker; rows and summary name the environment, nothing is written into the run."""
    root = tmp_path / "runs"
    shutil.copytree(evolved_run.root, root)
    result = CliRunner().invoke(app, ["eval", "--run", "evo", "--env", "bfcl", "--split", "test", "--max-tasks", "2",
                                      "--root", str(root)])  # fmt: skip
    assert result.exit_code == 0, result.output
    [folder] = folders(root)
    summary = json.loads((folder / "evaluation.json").read_text())
    bfcl_tests = {task.id for task in envs.make("bfcl").tasks("test")}
    evals = pq.read_table(folder / "evals.parquet").to_pylist()
    assert summary["env"] == "bfcl" and summary["options"] == {} and summary["tasks"] == {"test": 2}
    assert len(evals) == 2 and {row["task_id"] for row in evals} <= bfcl_tests
    assert "test: success" in result.output and "(policy after round 1, bfcl)" in result.output
    assert not (root / "run=evo" / "evaluations").exists()


def test_results_are_an_artifact_the_catalog_and_runs_list_show(run_root):
    from coevolve.flows.summary import runs_overview
    from coevolve.storage.catalog import build_catalog, query

    shown = query(run_root, "SELECT run, round, stage, env, env_seed, split, tasks, success, policy_version "
                            "FROM evaluations WHERE split = 'validation'").to_pylist()  # fmt: skip
    [summary] = [json.loads((f / "evaluation.json").read_text()) for f in folders(run_root, 1)][:1]
    assert shown and all(row["run"] == "evo" and row["env"] == "toolworld" and row["env_seed"] == 9001 for row in shown)
    assert {row["round"] for row in shown} == {1} and shown[0]["success"] == summary["success"]["validation"]
    assert shown[0]["stage"] == folders(run_root, 1)[0].name.removeprefix("stage=")
    import duckdb
    with duckdb.connect(str(build_catalog(run_root)), read_only=True) as con:  # the persisted catalog too
        assert con.execute("SELECT count(*) FROM evaluations").fetchone()[0] == len(query(
            run_root, "SELECT * FROM evaluations"))
    [row] = runs_overview(run_root)
    assert row["fresh-task eval"].startswith("r1 toolworld seed 9001: validation")


def test_baseline_scores_the_initial_policy_once_on_the_same_tasks(run_root):
    args = ["eval", "--run", "evo", "--env-seed", "9001", "--split", "validation", "--max-tasks", "3",
            "--baseline", "--root", str(run_root)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    [base] = folders(run_root, -1)
    [ours] = [f for f in folders(run_root, 1) if f.name == base.name]  # same tasks key: the same tasks
    base_rows, our_rows = (pq.read_table(f / "evals.parquet").to_pylist() for f in (base, ours))
    assert sorted(r["task_id"] for r in base_rows) == sorted(r["task_id"] for r in our_rows) and len(base_rows) == 3
    assert {r["policy_version"] for r in base_rows} == {"base-" + base_rows[0]["policy_version"].split("-", 1)[1]}
    assert "(policy after round 1) vs" in result.output and "(initial policy) on the same 3 tasks" in result.output
    assert "eval initial policy: 3/3 episodes" in result.stderr
    written = (base / "evals.parquet").stat().st_mtime_ns
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "eval initial policy" not in again.stderr  # stored, not scored again
    assert (base / "evals.parquet").stat().st_mtime_ns == written


def test_a_pruned_checkpoint_is_one_line_that_offers_the_initial_policy(evolved_run, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(evolved_run.root, root)
    shutil.rmtree(root / "run=evo" / "checkpoints" / "round=0")
    args = ["eval", "--run", "evo", "--env-seed", "9001", "--round", "0", "--split", "validation",
            "--max-tasks", "2", "--root", str(root)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "round 0's checkpoint" in refused.output and "was pruned" in refused.output
    assert "--baseline scores the initial policy (base-" in refused.output
    result = CliRunner().invoke(app, [*args, "--baseline"])
    assert result.exit_code == 0, result.output
    assert "scored the initial policy only" in result.output and "(initial policy, toolworld" in result.output
    assert folders(root, -1) and not folders(root, 0)
