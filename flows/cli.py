"""`coevolve`: the command line. Heavy imports (torch, prefect, transformers) happen inside commands,
so `coevolve --help` is instant.

    coevolve run configs/toolworld-smollm2.yaml            # a short run of the demo config
    coevolve stage rollout --run demo --round 1 --force    # re-run one stage from cached inputs
    coevolve sql "SELECT round, avg(reward) FROM trajectories GROUP BY ALL ORDER BY round"
    coevolve runs                                          # runs, rounds, dataset size, success
    coevolve env list | coevolve env replay toolworld --split test
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="CoEvolve: agent-data mutual evolution.")
env_app = typer.Typer(no_args_is_help=True, help="Environments: list them, replay reference solutions.")
models_app = typer.Typer(no_args_is_help=True, help="Models: resolve and convert into the local cache.")
app.add_typer(env_app, name="env")
app.add_typer(models_app, name="models")

Overrides = Annotated[list[str] | None, typer.Option("--set", help="Config override KEY=VALUE (repeatable).")]
RootOption = Annotated[Path | None, typer.Option("--root", help="Storage root (default: $COEVOLVE_HOME or runs).")]


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def _root(root: Path | None) -> Path:
    return root or Path(os.environ.get("COEVOLVE_HOME", "runs"))


def _quiet_libraries() -> None:
    """Keep the terminal for our progress bars and summary lines (Prefect's own logs stay in its API)."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="YAML run config, e.g. configs/toolworld-smollm2.yaml.")],
    rounds: Annotated[int | None, typer.Option(help="Total rounds the run should have (default: run.rounds).")] = None,
    run_name: Annotated[str | None, typer.Option("--run", help="Run name (default: run.name).")] = None,
    overrides: Overrides = None,
    root: RootOption = None,
) -> None:
    """Run or continue a CoEvolve run in-process (the `coevolve` Prefect flow on an ephemeral API)."""
    from flows.config import ConfigError, load_config

    try:
        cfg = load_config(config, overrides or [])
    except ConfigError as exc:
        _fail(str(exc))
    if root is not None:
        os.environ["COEVOLVE_HOME"] = str(root)
    _quiet_libraries()
    from flows.coevolve import coevolve

    result = coevolve(str(config), run=run_name or cfg.run.name, rounds=rounds, overrides=overrides or [])
    typer.echo(f"\nrun '{result['run']}' is in {result['root']}/run={result['run']}/")
    typer.echo(f"catalog: {result['root']}/catalog.duckdb (open it with any DuckDB client), or try:")
    typer.echo('  coevolve sql "SELECT round, source, count(*) AS episodes, avg(reward) AS reward, '
               'avg(success::INT) AS success FROM trajectories GROUP BY ALL ORDER BY round, source"')


@app.command()
def stage(
    name: Annotated[str, typer.Argument(help="Stage name, e.g. rollout, grpo_update, evaluate.")],
    run_name: Annotated[str, typer.Option("--run", help="Run name.")],
    round_: Annotated[int, typer.Option("--round", help="Round number.")],
    force: Annotated[bool, typer.Option(help="Recompute even if the cache key matches.")] = False,
    overrides: Overrides = None,
    root: RootOption = None,
) -> None:
    """Re-run one stage of a run from its cached inputs (reports 'cached' when nothing changed)."""
    from flows.config import ConfigError, load_config
    from stages.context import RunContext
    from stages.registry import get_stage
    from stages.runner import run_stage
    from storage.layout import RunLayout
    from storage.parquet import ArtifactError

    _quiet_libraries()
    layout = RunLayout(_root(root), run_name)
    if not layout.config_path.exists():
        _fail(f"no run '{run_name}' under {layout.root} ({layout.config_path} missing); see `coevolve runs`")
    try:
        stage_def = get_stage(name)
        cfg = load_config(layout.config_path, overrides or [])
        record = run_stage(stage_def, RunContext.create(cfg, run_name, layout.root), round_, force=force)
    except (ConfigError, ArtifactError, ValueError) as exc:
        _fail(str(exc))
    state = "cached" if record.cached else f"computed in {record.manifest.seconds:.1f} s"
    typer.echo(f"{name} round {round_}: {state}; key {record.manifest.key}")
    for ref in record.manifest.artifacts.values():
        typer.echo(f"  {ref.name}: {ref.rows} rows -> {ref.path}")


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL over the views trajectories, steps, samples, updates, ...")],
    format_: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    root: RootOption = None,
) -> None:
    """Query every run with DuckDB (views over the Parquet artifacts, with run/round/stage columns)."""
    import duckdb

    from storage.catalog import query as run_query

    if format_ not in {"table", "csv", "json"}:
        _fail("--format must be table, csv or json")
    try:
        table = run_query(_root(root), query)
    except duckdb.Error as exc:
        _fail(f"{exc}".strip())
    from flows.render import print_table

    print_table(table, format_)


@app.command()
def runs(root: RootOption = None) -> None:
    """List runs with their rounds, dataset size and success rates."""
    from flows.render import print_runs

    print_runs(_root(root))


@env_app.command("list")
def env_list() -> None:
    """Environments, their splits and task counts (or what is missing to use them)."""
    import envs

    for name in envs.available():
        try:
            env = envs.make(name)
            counts = ", ".join(f"{s} {len(env.tasks(s))}" for s in env.splits())
        except Exception as exc:  # an environment that needs a server or data not installed here
            counts = f"not available ({str(exc).splitlines()[0]}); see `coevolve env check {name}`"
        typer.echo(f"{name}: {counts}")


@env_app.command("check")
def env_check(name: Annotated[str, typer.Argument(help="Environment name.")]) -> None:
    """Say what an environment needs and whether it is there (exit 1 if something is missing)."""
    from flows.env_check import check_environment, ready

    findings = check_environment(name)
    for line in findings:
        typer.echo(line)
    if not ready(findings):
        raise typer.Exit(1)


@env_app.command("replay")
def env_replay(
    name: Annotated[str, typer.Argument(help="Environment name.")],
    split: Annotated[str, typer.Option(help="Split to replay.")] = "test",
) -> None:
    """Replay every reference solution of a split through the episode loop; prints the success rate."""
    import envs
    from envs.replay import replay_reference

    env = envs.make(name)
    if split not in env.splits():
        _fail(f"{name} has no split {split!r}; splits: {', '.join(env.splits())}")
    tasks = env.tasks(split)
    results = [replay_reference(envs.make(name), task) for task in tasks]
    ok = sum(r.success for r in results)
    typer.echo(f"{name}/{split}: {ok}/{len(tasks)} reference solutions succeed ({ok / max(len(tasks), 1):.1%})")
    if ok < len(tasks):
        raise typer.Exit(1)


@models_app.command("resolve")
def models_resolve(name: Annotated[str, typer.Argument(help="smollm2-135m, tiny-random-llama, a dir or hub id.")]):
    """Resolve a model name to a local HF directory (converting it once if needed)."""
    from llm.models import resolve_model

    typer.echo(resolve_model(name))


def main() -> None:  # pragma: no cover - console entry point
    app(sys.argv[1:])
