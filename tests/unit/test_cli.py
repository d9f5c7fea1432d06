"""The operator-facing CLI without running a model: every error a user will hit gets one paragraph and
the command that fixes it; `more` / completed-round arithmetic; the docs and deployment files stay in
step with the code. Runs are laid out by hand with the real storage classes (no flow, no model)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.config import load_config
from coevolve.flows.runs import RunError, completed_rounds, identity_changes, rounds_to_run
from coevolve.flows.summary import artifact_key, markdown_summary, run_metrics
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.schemas import ARTIFACTS
from coevolve.storage.store import RunStore
from tests.conftest import CONFIGS, REPO, free_port

TINY = CONFIGS / "test-tiny.yaml"


@pytest.fixture(autouse=True)
def _restore_coevolve_home(monkeypatch, tmp_path):
    """`coevolve run --root` sets COEVOLVE_HOME for the flow; keep that inside each test."""
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def one_paragraph(result) -> str:
    """The error text, asserting exit 2, no traceback and a single paragraph."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    text = " ".join(result.output.split())
    assert text.startswith("error: ") and "Traceback" not in text
    assert "\n\n" not in result.output.strip()
    return text


def make_run(root: Path, run: str = "demo", rounds: int = 1, config: Path = TINY) -> RunLayout:
    """A run on disk: the saved config and, per round, a finished manifest for every planned stage."""
    from coevolve.stages.round_plan import round_plan

    layout = RunLayout(root, run)
    cfg = load_config(config)
    layout.config_path.parent.mkdir(parents=True)
    layout.config_path.write_text(cfg.to_yaml())
    for r in range(rounds):
        for stage in round_plan(cfg, r):
            Manifest(stage.name, run, r, "k", 1, outputs=_outputs(stage.name, r)).write(layout.manifest_path(r, stage.name))
    return layout


def _outputs(stage: str, round_: int) -> dict:
    return {
        "bootstrap": {"dataset_size": 40},
        "rollout": {"success_rate": 0.25 * (round_ + 1), "mean_reward": 0.5},
        "grpo_update": {"loss": -0.5, "kl": 0.01, "policy_version": f"r{round_}-x", "checkpoint": "/nowhere"},
        "evaluate": {"test_success": 0.5, "test_reward": 0.6},
    }.get(stage, {})


def context(layout: RunLayout):
    from coevolve.flows.run_context import open_run

    return open_run(load_config(layout.config_path), layout.run, layout.root, quiet=True)


# --- help -----------------------------------------------------------------------------------------


def test_help_lists_the_operating_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "serve", "stage", "fork", "sql", "runs", "show", "env", "models"):
        assert re.search(rf"\b{command}\b", result.output)
    assert "--more" in invoke("run", "--help").output


# --- unknown run, round, stage ----------------------------------------------------------------------


def test_stage_of_an_unknown_run(tmp_path):
    text = one_paragraph(invoke("stage", "rollout", "--run", "nope", "--round", "0", "--root", str(tmp_path)))
    assert "no run 'nope'" in text and "`coevolve runs`" in text and "coevolve run CONFIG --run nope" in text


def test_continue_an_unknown_run_without_a_config(tmp_path):
    text = one_paragraph(invoke("run", "--run", "nope", "--root", str(tmp_path)))
    assert "no run 'nope'" in text and "coevolve run configs/" in text


def test_stage_of_a_round_the_run_does_not_have(tmp_path):
    make_run(tmp_path, rounds=2)
    text = one_paragraph(invoke("stage", "rollout", "--run", "demo", "--round", "5", "--root", str(tmp_path)))
    assert "rounds 0..1, not round 5" in text and "coevolve run --run demo --more 1" in text


def test_stage_name_typo_suggests_the_stage(tmp_path):
    make_run(tmp_path)
    text = one_paragraph(invoke("stage", "rollot", "--run", "demo", "--round", "0", "--root", str(tmp_path)))
    assert "unknown stage 'rollot'" in text and "Did you mean `rollout`?" in text


def test_fork_of_an_unknown_run_or_into_a_bad_or_taken_name(tmp_path):
    text = one_paragraph(invoke("fork", "--from", "nope", "--run", "copy", "--root", str(tmp_path)))
    assert "no run 'nope'" in text and "`coevolve runs`" in text
    make_run(tmp_path)
    assert "invalid run name" in one_paragraph(invoke("fork", "--from", "demo", "--run", "../x", "--root", str(tmp_path)))
    make_run(tmp_path, run="taken")
    assert "fork into a new name" in one_paragraph(invoke("fork", "--from", "demo", "--run", "taken", "--root", str(tmp_path)))


def test_fork_copies_no_stage_whose_manifest_is_not_current(tmp_path):
    make_run(tmp_path)  # hand-written manifests: their cache keys match no config
    result = invoke("fork", "--from", "demo", "--run", "copy", "--set", "evolve.every=1", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "0 stages copied from 'demo'" in result.output and "coevolve run --run copy" in result.output
    assert load_config(RunLayout(tmp_path, "copy").config_path).evolve.every == 1


def test_bad_override_names_the_field(tmp_path):
    text = one_paragraph(invoke("run", str(TINY), "--set", "rollout.k=zero", "--root", str(tmp_path)))
    assert "rollout.k" in text


# --- a config that changes what the run is ------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    ["model.name=tiny-random-qwen2"],
    ["env.name=bfcl", "env.options={}", "eval.splits=[ae-test]", "dataset.seed_split=ae-train"],
])  # fmt: skip
def test_changing_model_or_env_mid_run_is_refused(tmp_path, overrides):
    make_run(tmp_path)
    sets = [arg for override in overrides for arg in ("--set", override)]
    text = one_paragraph(invoke("run", str(TINY), "--run", "demo", *sets, "--root", str(tmp_path)))
    field = overrides[0].split("=")[0]
    assert f"changes what run 'demo' is ({field}:" in text
    assert "--run demo-2" in text and "--force" in text


def test_stage_set_of_an_identity_field_is_refused_and_not_saved(tmp_path):
    layout = make_run(tmp_path)
    before = layout.config_path.read_text()
    text = one_paragraph(invoke("stage", "rollout", "--run", "demo", "--round", "0", "--root", str(tmp_path),
                                "--set", "model.name=tiny-random-qwen2"))
    assert "model.name" in text
    assert layout.config_path.read_text() == before


def test_identity_changes_ignore_other_fields():
    saved = yaml.safe_load(load_config(TINY).to_yaml())
    assert identity_changes(saved, load_config(TINY, ["rollout.k=2", "train.lr=0.1"])) == []
    assert identity_changes(saved, load_config(TINY, ["model.name=x"])) == ["model.name: 'tiny-random-llama' -> 'x'"]


# --- Prefect server not running -------------------------------------------------------------------


def test_run_with_an_unreachable_prefect_server(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/api"
    text = one_paragraph(invoke("run", str(TINY), "--root", str(tmp_path), env={"PREFECT_API_URL": url}))
    assert f"no Prefect server answers at PREFECT_API_URL={url}" in text
    assert "prefect server start --host 127.0.0.1 --port 4200" in text and "unset PREFECT_API_URL" in text
    assert not (tmp_path / "run=test-tiny").exists()


def test_serve_with_an_unreachable_prefect_server():
    url = f"http://127.0.0.1:{free_port()}/api"
    text = one_paragraph(invoke("serve", env={"PREFECT_API_URL": url}))
    assert "no Prefect server answers" in text and "prefect server start" in text


def test_serve_without_a_prefect_server_configured(monkeypatch):
    monkeypatch.setattr("coevolve.flows.serve.configured_api_url", lambda: None)
    text = one_paragraph(invoke("serve"))
    assert "PREFECT_API_URL is not set" in text
    assert "PREFECT_API_URL=http://127.0.0.1:4200/api coevolve serve" in text


# --- corrupt files, unknown views and ids -------------------------------------------------------------


def test_sql_over_a_corrupt_parquet_file_names_the_stage_to_rerun(tmp_path):
    path = RunLayout(tmp_path, "demo").artifact_path(3, "rollout", "trajectories")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PAR1 not really parquet")
    text = one_paragraph(invoke("sql", "SELECT count(*) FROM trajectories", "--root", str(tmp_path)))
    assert "corrupt" in text and "coevolve stage rollout --run demo --round 3 --force" in text


def test_reading_a_corrupt_artifact_says_how_to_rebuild_it(tmp_path):
    from coevolve.storage.parquet import ArtifactError

    store = RunStore(RunLayout(tmp_path, "demo"))
    ref = store.write(0, "grpo_update", "updates", pa.Table.from_pylist([], schema=ARTIFACTS["updates"]))
    Manifest("grpo_update", "demo", 0, "k", 1, artifacts={"updates": ref}).write(
        store.layout.manifest_path(0, "grpo_update"))
    Path(ref.path).write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match=r"coevolve stage grpo_update --run demo --round 0 --force"):
        store.read(0, "grpo_update", "updates")


def test_sql_unknown_view_lists_the_views(tmp_path):
    make_run(tmp_path)
    RunStore(RunLayout(tmp_path, "demo")).write(0, "grpo_update", "updates",
                                                pa.Table.from_pylist([], schema=ARTIFACTS["updates"]))
    text = one_paragraph(invoke("sql", "SELECT * FROM trajectory", "--root", str(tmp_path)))
    assert "trajectory" in text and "Views under" in text and "updates" in text and "docs/sql.md" in text


def test_show_errors(tmp_path):
    assert "use `coevolve show task ID`" in one_paragraph(invoke("show", "tsk", "ab", "--root", str(tmp_path)))
    assert "no tasks under this storage root" in one_paragraph(
        invoke("show", "task", "ab", "--root", str(tmp_path)))


def test_runs_on_an_empty_root(tmp_path):
    result = invoke("runs", "--root", str(tmp_path))
    assert result.exit_code == 0 and "no runs under" in result.output


# --- completed rounds, `more`, round metrics ---------------------------------------------------------


def test_more_counts_from_the_completed_rounds(tmp_path):
    layout = make_run(tmp_path, rounds=2)
    ctx = context(layout)
    assert completed_rounds(ctx) == 2
    assert rounds_to_run(ctx, None, 1) == 3
    assert rounds_to_run(ctx, None, 0) == 2
    assert rounds_to_run(ctx, 5, None) == 5
    assert rounds_to_run(ctx, None, None) == ctx.config.run.rounds
    # a round killed half-way is not completed: `more=1` finishes it
    Manifest("rollout", "demo", 2, "k", 1).write(layout.manifest_path(2, "rollout"))
    layout.manifest_path(1, "evaluate").unlink()
    assert completed_rounds(ctx) == 1 and rounds_to_run(ctx, None, 1) == 2
    with pytest.raises(RunError, match="not both"):
        rounds_to_run(ctx, 3, 1)


def test_round_metrics_carry_the_dataset_size(tmp_path):
    layout = make_run(tmp_path, rounds=2)
    rows = run_metrics(context(layout).store, 2)
    assert [r["dataset_size"] for r in rows] == [40, 40]
    assert rows[1]["train_success"] == 0.5 and rows[0]["loss"] == -0.5 and rows[1]["eval_test_success"] == 0.5
    assert rows[0]["boundary_signals"] is None
    text = markdown_summary("demo", rows[1])
    assert "| train_success | 0.5 |" in text and "round 1" in text and "boundary" not in text


def test_artifact_keys_are_valid_prefect_keys():
    assert artifact_key("My_Run.v2", "rounds") == "my-run-v2-rounds"
    assert re.fullmatch(r"[a-z0-9-]+", artifact_key("x" * 80 + ".__", "summary"))


# --- docs and deployment files match the code --------------------------------------------------------


def documented_columns() -> dict[str, list[str]]:
    text = (REPO / "docs" / "sql.md").read_text()
    views = {}
    for name, table in re.findall(r"### `(\w+)`\n\n\| column .*?\n\|---.*?\n((?:\|.*\n?)+)", text):
        views[name] = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    return views


def test_sql_doc_lists_every_view_and_column():
    views = documented_columns()
    assert set(views) == set(ARTIFACTS)
    for name, schema in ARTIFACTS.items():
        assert views[name] == [*schema.names, "stage"], name


def test_sql_doc_has_the_example_queries():
    blocks = re.findall(r"```sql\n(.*?)```", (REPO / "docs" / "sql.md").read_text(), flags=re.DOTALL)
    assert len(blocks) >= 5
    for needle in ("FROM signals", "FROM datasets", "verifications", "lineage", "FROM trajectories"):
        assert any(needle in b for b in blocks), needle


def test_prefect_yaml_declares_the_served_deployment():
    import importlib

    from prefect.utilities.callables import parameter_schema

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    [deployment] = spec["deployments"]
    assert deployment["name"] == "round"
    path, name = deployment["entrypoint"].split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
    assert flow.name == "coevolve"
    schema = parameter_schema(flow.fn).model_dump()
    assert {"config", "run", "rounds", "overrides", "more", "force"} <= set(schema["properties"])
    assert not schema.get("required")  # `prefect deployment run coevolve/round -p run=demo -p more=1` works


def test_a_temporary_prefect_server_that_does_not_answer_names_the_way_out(monkeypatch):
    from coevolve.flows.prefect_api import PrefectApiError, prefect_api

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr("coevolve.flows.prefect_api.configured_api_url", lambda: None)
    with pytest.raises(PrefectApiError, match="did not answer within.*COEVOLVE_PREFECT_STARTUP_S.*PREFECT_API_URL"), prefect_api(
            startup_timeout_s=0.01):
        pass
    assert "PREFECT_API_URL" not in __import__("os").environ


def test_a_flow_run_is_named_after_its_run_and_how_far_it_goes(tmp_path):
    from coevolve.flows.coevolve import flow_run_label
    from coevolve.storage.layout import RunLayout
    from coevolve.storage.manifest import Manifest

    here = {"root": str(tmp_path)}
    assert flow_run_label({**here, "run": "demo", "more": 1}) == "demo +1 round (round 0)"
    layout = RunLayout(tmp_path, "demo")
    for round_, stages in ((0, ("rollout", "grpo_update")), (1, ("rollout", "grpo_update")), (2, ("rollout",))):
        for stage in stages:
            Manifest(stage, "demo", round_, "k", 1).write(layout.manifest_path(round_, stage))
    layout.stage_dir(1, "evaluate").mkdir()  # round 1 stopped in its evaluation: the next flow run redoes it
    assert flow_run_label({**here, "run": "demo", "more": 1}) == "demo +1 round (round 1)"
    assert flow_run_label({**here, "run": "demo", "more": 3}) == "demo +3 rounds (rounds 1..3)"
    assert flow_run_label({"config": "configs/test-tiny.yaml", "rounds": 4}) == "test-tiny to round 4"
    assert flow_run_label({"run": "demo"}) == "demo"
    assert flow_run_label({"spec": {"run": "handed", "config": {}}, "rounds": 2}) == "handed to round 2"


def test_the_flow_takes_a_resolved_spec_or_what_to_resolve_never_both(tmp_path):
    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.runs import RunError, RunSpec

    spec = RunSpec(config=load_config(CONFIGS / "test-tiny.yaml"), run="t", root=tmp_path)
    for clash in ({"config": str(CONFIGS / "test-tiny.yaml")}, {"overrides": ["rollout.k=2"]},
                  {"root": str(tmp_path)}, {"run": "other"}):
        with pytest.raises(RunError, match="either a resolved spec"):
            coevolve.fn(spec=spec, **clash)
    assert not (tmp_path / "run=t").exists()


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    from typer.testing import CliRunner

    from coevolve.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.output) == (0, f"coevolve {version('coevolve')}\n")


def test_the_sql_printed_after_a_run_under_another_root_runs_when_pasted(tmp_path, monkeypatch, capsys):
    from coevolve.cli import _print_where

    elsewhere = tmp_path / "my runs"
    RunStore(RunLayout(elsewhere, "demo")).write(
        0, "rollout", "trajectories", pa.Table.from_pylist([], schema=ARTIFACTS["trajectories"]))
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "default"))
    _print_where(str(elsewhere), "demo")
    pasted = next(line for line in capsys.readouterr().out.splitlines() if "coevolve sql" in line)
    assert f"--root '{elsewhere}'" in pasted
    result = invoke(*shlex.split(pasted)[1:])
    assert result.exit_code == 0, result.output

    monkeypatch.setenv("COEVOLVE_HOME", str(elsewhere))  # the default root: nothing to add
    _print_where(str(elsewhere), "demo")
    assert "--root" not in capsys.readouterr().out


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["models", "--help"]])
def test_help_text_reflows_to_the_terminal_and_names_no_placeholder_lost(args):
    """A docstring's line breaks are not the help's: at 200 columns a sentence is one line."""
    wide = CliRunner().invoke(app, args, env={"COLUMNS": "200"}).output
    sentence = {"--help": "Run or continue a CoEvolve run in-process (the coevolve Prefect flow, on "
                          "PREFECT_API_URL's server or a temporary local one).",
                "run": "Run or continue a CoEvolve run in-process (the coevolve Prefect flow, on "
                       "PREFECT_API_URL's server or a temporary local one).",
                "models": "Build a config's warm starts into the model cache: merged from the shipped "
                          "adapters where there are (seconds), else trained (minutes)."}[args[0]]
    assert sentence in " ".join(wide.split()) and any(sentence[:60] in line for line in wide.splitlines())
    assert "ROOT/evaluations/RUN/" in CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).output


def test_ui_on_a_port_in_use_is_one_line_naming_the_port(tmp_path):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        text = one_paragraph(invoke("ui", "--root", str(tmp_path), "--port", str(port)))
    assert text == f"error: cannot serve on 127.0.0.1:{port}: the port is in use; pass another --port (or stop what holds it)"
