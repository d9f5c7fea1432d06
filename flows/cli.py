"""`coevolve`: the command line. Heavy imports (torch, prefect, transformers) happen inside commands,
so `coevolve --help` is instant.

    coevolve run configs/toolworld-smollm2.yaml            # a short run of the demo config
    coevolve run --run toolworld-smollm2 --more 1          # one more round, with the run's saved config
    coevolve serve                                         # serve deployment coevolve/round (PREFECT_API_URL)
    coevolve stage rollout --run demo --round 1 --force    # re-run one stage from cached inputs
    coevolve fork demo demo-f1 --set evolve.every=1        # a new run sharing demo's identical stages
    coevolve update-worker --run demo --machine-rank 1     # another machine's share of multi-machine updates
    coevolve sql "SELECT round, avg(reward) FROM trajectories GROUP BY ALL ORDER BY round"   # docs/sql.md
    coevolve runs                                          # runs, rounds, dataset size, success
    coevolve show task 3f2a | coevolve show trajectory 9c  # one task / episode, by id prefix
    coevolve ui                                            # a read-only web view of the runs (coevolve.ui)
    coevolve env list | coevolve env replay toolworld --split test

Bad input or state (config, run, round, stage name, corrupt artifact, unreachable Prefect server) ends in
one paragraph on stderr that names the command that fixes it, and exit status 2.
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
engine_app = typer.Typer(no_args_is_help=True, help="Inference servers for the policy (vLLM, in its own venv).")
app.add_typer(engine_app, name="engine")

Overrides = Annotated[list[str] | None, typer.Option("--set", help="Config override KEY=VALUE (repeatable).")]
RootOption = Annotated[Path | None, typer.Option("--root", help="Storage root (default: $COEVOLVE_HOME or runs).")]


def _fail(message: str) -> None:
    """One paragraph on stderr, then exit 2 (bad input or state, never a traceback)."""
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def _run_layout(root: Path | None, run: str):
    """The run's folder under the storage root; a name that cannot be one is one line, not a traceback."""
    from coevolve.storage.layout import RunLayout

    try:
        return RunLayout(_root(root), run)
    except ValueError as exc:
        _fail(str(exc))


def _root(root: Path | None) -> Path:
    from coevolve.storage.layout import storage_root

    return storage_root(root)


@app.callback()
def main_options(verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show library logs (Prefect, transformers) on the terminal too.")] = False) -> None:
    """Set before any library is imported: Prefect configures its logging when first imported."""
    console = "INFO" if verbose else "WARNING"
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", console)  # INFO still reaches the API
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "info" if verbose else "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "0" if verbose else "1")


def quiet_libraries() -> None:
    """Keep the terminal for our progress bars and summary lines: flow and task run logs (state changes,
    a failed stage's traceback) go to the Prefect API only, unless --verbose; the command itself reports
    errors, as one paragraph for bad input or state."""
    import logging

    from prefect.logging.configuration import ensure_logging_setup
    from transformers.utils import logging as hf_logging

    if os.environ.get("TRANSFORMERS_VERBOSITY") == "error":
        hf_logging.disable_progress_bar()
        ensure_logging_setup()
        for name in ("prefect.flow_runs", "prefect.task_runs"):
            logging.getLogger(name).propagate = False


def _user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean bad input or state (config, run, artifacts, Prefect API), shown as one paragraph."""
    from coevolve.config import ConfigError
    from coevolve.flows.prefect_api import PrefectApiError
    from coevolve.flows.runs import RunError
    from coevolve.storage.parquet import ArtifactError

    return ConfigError, RunError, ArtifactError, PrefectApiError


def _require_prefect_api(command: str) -> None:
    from coevolve.flows.serve import api_problem

    problem = api_problem(required=command == "serve")
    if problem:
        _fail(problem)


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(
        help="YAML run config, e.g. configs/toolworld-smollm2.yaml (default: the saved config of --run).")] = None,
    rounds: Annotated[int | None, typer.Option(help="Total rounds the run should have (default: run.rounds).")] = None,
    more: Annotated[int | None, typer.Option(help="Run this many rounds beyond the completed ones.")] = None,
    run_name: Annotated[str | None, typer.Option("--run", help="Run name (default: run.name).")] = None,
    force: Annotated[bool, typer.Option(
        help="Recompute every stage; also accepts a config that changes the run's model or environment.")] = False,
    overrides: Overrides = None,
    root: RootOption = None,
) -> None:
    """Run or continue a CoEvolve run in-process (the `coevolve` Prefect flow, on PREFECT_API_URL's server
    or a temporary local one). A run whose every stage is cached prints its rounds without starting Prefect."""
    if root is not None:
        os.environ["COEVOLVE_HOME"] = str(root)
    from coevolve.flows.runs import all_cached, resolve_run, rounds_to_run
    from coevolve.pipeline.context import RunContext

    try:  # check config and run before paying for torch and Prefect
        cfg, name, root_dir = resolve_run(config, run_name, overrides or [], force=force)
        ctx = RunContext.create(cfg, name, root_dir)
        total = rounds_to_run(ctx, rounds, more)
        if not force and all_cached(ctx, total):
            return _print_finished(ctx, total)
        quiet_libraries()
        from coevolve.flows.coevolve import coevolve
        from coevolve.flows.prefect_api import prefect_api

        with prefect_api():
            result = coevolve(None if config is None else str(config), run=name, rounds=total,
                              overrides=overrides or [], force=force)
    except _user_errors() as exc:
        _fail(str(exc))
    _print_where(result["root"], result["run"])


def _print_finished(ctx, rounds: int) -> None:
    from coevolve.flows.summary import round_line, run_metrics
    from coevolve.flows.tracking import track_rounds

    rows = run_metrics(ctx.store, rounds)
    for row in rows:
        typer.echo(round_line(row, ["all"]).replace("cached: all", "cached"))
    track_rounds(ctx.config, ctx.store.layout, rows)  # rounds finished before tracking was on
    _print_where(str(ctx.store.layout.root), ctx.run)


def _print_where(root: str, run: str) -> None:
    typer.echo(f"\nrun '{run}' is in {root}/run={run}/; inspect it with SQL (docs/sql.md):")
    typer.echo('  coevolve sql "SELECT round, source, count(*) AS episodes, avg(success::INT) AS success '
               'FROM trajectories GROUP BY ALL ORDER BY ALL"')


@app.command()
def serve(
    name: Annotated[str, typer.Option(help="Deployment name: the flow is served as coevolve/NAME.")] = "round",
    limit: Annotated[int | None, typer.Option(help="At most this many flow runs at once.")] = 1,
) -> None:
    """Serve the `coevolve` flow as deployment coevolve/NAME from this process (needs a Prefect server:
    PREFECT_API_URL). Trigger it with `prefect deployment run coevolve/round -p config=... -p more=1`."""
    _require_prefect_api("serve")
    quiet_libraries()
    from coevolve.flows.serve import serve_deployment

    serve_deployment(name, limit=limit)


@app.command()
def stage(
    name: Annotated[str, typer.Argument(help="Stage name, e.g. rollout, grpo_update, evaluate.")],
    run_name: Annotated[str, typer.Option("--run", help="Run name.")],
    round_: Annotated[int, typer.Option("--round", help="Round number.")],
    force: Annotated[bool, typer.Option(help="Recompute even if the cache key matches.")] = False,
    overrides: Annotated[list[str] | None, typer.Option(
        "--set", help="Config override KEY=VALUE (repeatable), saved into the run's config.yaml.")] = None,
    root: RootOption = None,
) -> None:
    """Re-run one stage of a run from its cached inputs (reports 'cached' when nothing changed).

    `--set` changes the run's saved config (so the flow and later stages use it too); stages whose
    config sections it touches recompute when they next run."""
    from coevolve.flows.runs import check_round
    from coevolve.stages import get_stage

    layout = _run_layout(root, run_name)
    if not layout.config_path.exists():
        _fail(f"no run '{run_name}' under {layout.root} ({layout.config_path} missing). List runs with "
              f"`coevolve runs`, or start this one with `coevolve run CONFIG --run {run_name}`.")
    try:
        stage_def = get_stage(name)
    except ValueError as exc:
        _fail(f"{exc}. {_did_you_mean(name)}")
    from coevolve.storage.lock import run_lock

    try:
        check_round(layout, round_)
        with run_lock(layout, f"coevolve stage {name} --run {run_name} --round {round_}"):
            cfg = _stage_config(layout, overrides or [], force=force)
            quiet_libraries()
            record = _rerun_stage(stage_def, cfg, layout, round_, force=force)
    except _user_errors() as exc:
        _fail(str(exc))
    state = "cached" if record.cached else f"computed in {record.manifest.seconds:.1f} s"
    typer.echo(f"{name} round {round_}: {state}; key {record.manifest.key}")
    for ref in record.manifest.artifacts.values():
        typer.echo(f"  {ref.name}: {ref.rows} rows -> {ref.path}")


def _rerun_stage(stage_def, cfg, layout, round_: int, *, force: bool):
    """The stage in this process, as a `coevolve-stage` flow run when a Prefect API is configured."""
    from coevolve.flows.prefect_api import configured_api_url
    from coevolve.pipeline.context import RunContext
    from coevolve.pipeline.runner import run_stage

    if not configured_api_url():
        return run_stage(stage_def, RunContext.create(cfg, layout.run, layout.root), round_, force=force)
    from coevolve.flows.coevolve import coevolve_stage
    from coevolve.flows.prefect_api import prefect_api

    with prefect_api():
        result = coevolve_stage(stage_def.name, layout.run, round_, str(layout.root), force=force)
    from coevolve.pipeline.runner import StageRecord

    store = RunContext.create(cfg, layout.run, layout.root).store
    return StageRecord(store.completed(round_, stage_def.name), cached=result["cached"])


@app.command("update-worker")
def update_worker(
    run_name: Annotated[str, typer.Option("--run", help="Run whose multi-machine updates to join.")],
    machine_rank: Annotated[int, typer.Option(help="This machine's rank (1, 2, ...; machine 0 runs the flow).")],
    jobs: Annotated[int | None, typer.Option(help="Stop after joining this many updates (default: never).")] = None,
    root: RootOption = None,
) -> None:
    """Join a run's grpo updates from another machine (accelerate config with num_machines > 1)."""
    from coevolve.executors.accelerate_update import serve_machine

    try:
        serve_machine(_run_layout(root, run_name).run_dir, machine_rank, jobs=jobs,
                      report=lambda line: typer.echo(line, err=True))  # fmt: skip
    except ValueError as exc:
        _fail(str(exc))


@app.command()
def fork(
    source: Annotated[str, typer.Argument(help="The run to copy stages from.")],
    target: Annotated[str, typer.Argument(help="The new run's name.")],
    rounds: Annotated[int, typer.Option(help="Consider the stages of the source's first ROUNDS rounds.")] = 1,
    config: Annotated[Path | None, typer.Option(
        help="The new run's config file (default: the source's saved config).")] = None,
    overrides: Overrides = None,
    root: RootOption = None,
) -> None:
    """Start run TARGET from the stages of run SOURCE that its config (the source's, or --config, plus
    --set) would compute identically; `coevolve run --run TARGET` then computes only the rest. E.g.
    `coevolve fork grpo-s0 coevolve-s0 --set evolve.every=1` shares round 0's rollout, update and evals."""
    from coevolve.config import load_config
    from coevolve.flows.fork import fork_run

    base = config or _run_layout(root, source).config_path
    try:
        if not base.exists():
            _fail(f"no run '{source}' under {_root(root)} ({base} missing). List runs with `coevolve runs`.")
        copied = fork_run(load_config(base, overrides or []), _root(root), source, target, rounds)
    except _user_errors() as exc:
        _fail(str(exc))
    typer.echo(f"run '{target}': {len(copied)} stages copied from '{source}'"
               + "".join(f"\n  round {r}: {stage}" for r, stage in copied))  # fmt: skip
    typer.echo(f"continue it with `coevolve run --run {target} --rounds N` (the rest of each round is computed)")


def _did_you_mean(name: str) -> str:
    import difflib

    from coevolve.stages import STAGES

    close = difflib.get_close_matches(name, list(STAGES), n=1)
    return f"Did you mean `{close[0]}`?" if close else "See `coevolve stage --help`."


def _stage_config(layout, overrides: list[str], *, force: bool):
    """The run's saved config; overrides are validated, then saved into it (with a note)."""
    from coevolve.config import load_config
    from coevolve.flows.runs import check_compatible, persist_overrides

    before = load_config(layout.config_path)
    if not overrides:
        return before
    if not force:
        check_compatible(layout, load_config(layout.config_path, overrides), config_source="--set")
    cfg = persist_overrides(layout, overrides)
    if cfg != before:
        typer.echo(f"note: saved {', '.join(overrides)} into {layout.config_path}; the flow and later stages "
                   f"of run '{layout.run}' use it (`coevolve run --run {layout.run}` continues with it)")
    return cfg


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL over the views trajectories, steps, samples, updates, ...")],
    format_: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    root: RootOption = None,
) -> None:
    """Query every run with DuckDB (views over the Parquet artifacts, with run/round/stage columns;
    see docs/sql.md)."""
    import duckdb

    from coevolve.storage.catalog import ArtifactFiles
    from coevolve.storage.catalog import query as run_query

    if format_ not in {"table", "csv", "json"}:
        _fail("--format must be table, csv or json")
    files = ArtifactFiles.scan(_root(root))
    try:
        table = run_query(_root(root), query, files)
    except duckdb.Error as exc:
        from coevolve.flows.render import explain_query_error

        _fail(explain_query_error(exc, _root(root)))
    from coevolve.flows.render import print_table, unreadable_notes

    for note in unreadable_notes(files.unreadable):
        typer.echo(note, err=True)
    print_table(table, format_)


@app.command()
def runs(root: RootOption = None) -> None:
    """List runs with their rounds, dataset size and success rates (from their manifests)."""
    from coevolve.flows.render import print_rows
    from coevolve.flows.summary import runs_overview

    rows = runs_overview(_root(root))
    if not rows:
        typer.echo(f"no runs under {_root(root)} yet; start one with `coevolve run configs/test-tiny.yaml`")
        return
    print_rows(rows)


@app.command()
def evolution(
    run_name: Annotated[str, typer.Argument(metavar="RUN", help="The run to report on.")],
    root: RootOption = None,
) -> None:
    """What a run's data evolution did: signals, explorations, candidates, verdicts, merged tasks, how the
    policy did on them, one admitted task and the SQL that follows it back to its signal."""
    from coevolve.flows.evolution_report import evolution_report

    layout = _run_layout(root, run_name)
    if not layout.run_dir.exists():
        _fail(f"no run '{run_name}' under {layout.root}; list runs with `coevolve runs`")
    for line in evolution_report(layout.root, run_name):
        typer.echo(line)


@app.command()
def show(
    kind: Annotated[str, typer.Argument(help="task or trajectory.")],
    id_: Annotated[str, typer.Argument(metavar="ID", help="Its id, or any unique prefix of it.")],
    run_name: Annotated[str | None, typer.Option("--run", help="Run to look in (default: any).")] = None,
    root: RootOption = None,
) -> None:
    """Show one task (turns, solution, checker, lineage, success per round) or one trajectory
    (messages, tool calls and observations, reward, its task) as a readable conversation."""
    import duckdb

    from coevolve.flows.show import IdLookupError
    from coevolve.flows.show import show as show_item

    if kind not in {"task", "trajectory"}:
        _fail(f"cannot show {kind!r}: use `coevolve show task ID` or `coevolve show trajectory ID`")
    try:
        show_item(kind, id_, _root(root), run_name)
    except IdLookupError as exc:
        _fail(str(exc))
    except duckdb.Error as exc:
        from coevolve.flows.render import explain_query_error

        _fail(explain_query_error(exc, _root(root)))


@app.command()
def ui(
    root: RootOption = None,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8420,
    host: Annotated[str, typer.Option(help="Address to bind; anyone who reaches it can read the runs.")] = "127.0.0.1",
) -> None:
    """A read-only local web view of the runs: curves, rounds, trajectories and their tokens, signals,
    verification outcomes and each synthesized task's lineage (coevolve.ui)."""
    if not _root(root).is_dir():
        _fail(f"no storage root {_root(root)}; start a run with `coevolve run configs/test-tiny.yaml` or pass --root")
    from coevolve.ui.app import serve

    serve(_root(root), host=host, port=port)


@env_app.command("list")
def env_list() -> None:
    """Environments, their splits and task counts (or what is missing to use them)."""
    from coevolve import envs

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
    from coevolve.flows.env_check import check_environment, ready

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
    from coevolve import envs
    from coevolve.envs.replay import replay_reference

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
    from coevolve.llm.models import resolve_model

    typer.echo(resolve_model(name))


@engine_app.command("serve")
def engine_serve(
    config: Annotated[Path, typer.Argument(help="Run config whose model.servers[SERVER] (or teacher) is served.")],
    server: Annotated[int, typer.Option(help="Which entry of model.servers to start.")] = 0,
    teacher: Annotated[bool, typer.Option(help="Serve the config's `openai` teacher at teacher.base_url instead.")] = False,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    venv: Annotated[Path | None, typer.Option(help="The vLLM venv (default .venv-vllm; make vllm-env).")] = None,
    kv_cache_gib: Annotated[int, typer.Option(help="KV cache in GiB (vLLM's CPU build).")] = 2,
    gpu_memory_utilization: Annotated[float, typer.Option(help="vLLM's share of GPU memory (CUDA build).")] = 0.85,
    dry_run: Annotated[bool, typer.Option(help="Print the command instead of running it.")] = False,
    overrides: Overrides = None,
) -> None:
    """Start a vLLM server for the policy (or the teacher) in the vLLM venv, until stopped (llm/vllm_server.py)."""
    import shlex

    from coevolve.config import load_config
    from coevolve.llm import vllm_server

    try:
        cfg = load_config(config, overrides or [])
        environment = vllm_server.find_venv(venv) if not dry_run else Path(venv or vllm_server.VENV)
        spec = (vllm_server.teacher_spec(cfg) if teacher
                else vllm_server.policy_spec(cfg, server, write_template=not dry_run))  # fmt: skip
        argv, env = vllm_server.serve_command(spec, venv=environment, host=host, kv_cache_gib=kv_cache_gib,
                                              gpu_memory_utilization=gpu_memory_utilization)  # fmt: skip
    except (*_user_errors(), ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    line = " ".join(f"{k}={v}" for k, v in env.items()) + " " + shlex.join(argv)
    if dry_run:
        typer.echo(line)
        return
    typer.echo(f"starting: {line}", err=True)
    raise typer.Exit(vllm_server.run_server(argv, env))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True}, add_help_option=False)
def bench(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Benchmark name, `list` or `report`.")] = None,
) -> None:
    """Benchmarks: `coevolve bench list`, `coevolve bench NAME [ARGS...]`, `coevolve bench report` (benchmarks/)."""
    from coevolve.benchmarks.suite import entry, main

    if name is None or name in ("-h", "--help"):
        main([])
        return
    try:
        run = entry(name)
    except ValueError as exc:
        _fail(str(exc))
    run(list(ctx.args))


def main() -> None:  # pragma: no cover - console entry point
    app(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover - `python -m flows.cli`
    main()
