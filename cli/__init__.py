"""`coevolve`: the command line. Heavy imports (torch, prefect, transformers) happen inside commands,
so `coevolve --help` is instant.

    coevolve run configs/demo.yaml                         # the demo: CoEvolve on the tool world, 2 rounds
    coevolve run --run demo --more 1                       # one more round, with the run's saved config
    coevolve serve                                         # serve deployment coevolve/round (PREFECT_API_URL)
    coevolve stage rollout --run demo --round 1 --force    # re-run one stage from cached inputs
    coevolve fork --from demo --run demo-f1 --set evolve.every=1   # a new run sharing demo's identical stages
    coevolve eval --run demo --env-seed 9001               # the policy on tasks of a seed no run used
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

from coevolve.cli import inspect_commands
from coevolve.cli.group_commands import bench, engine_app, env_app, models_app
from coevolve.cli.support import (
    Overrides,
    RootOption,
    fail,
    quiet_libraries,
    require_prefect_api,
    root_of,
    run_layout,
    user_errors,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="CoEvolve: agent-data mutual evolution.",
                  rich_markup_mode="markdown")  # docstrings reflow to the terminal's width


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"coevolve {version('coevolve')}")
        raise typer.Exit()


@app.callback()
def main_options(verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show library logs (Prefect, transformers) on the terminal too.")] = False,
        _version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                               help="Print the installed version and exit.")] = False) -> None:  # fmt: skip
    """Set before any library is imported: Prefect configures its logging when first imported."""
    console = "INFO" if verbose else "WARNING"
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", console)  # INFO still reaches the API
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "info" if verbose else "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "0" if verbose else "1")


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(
        help="YAML run config, e.g. configs/demo.yaml (default: the saved config of --run).")] = None,
    rounds: Annotated[int | None, typer.Option(help="Total rounds the run should have (default: run.rounds, or the rounds it has completed if more).")] = None,
    more: Annotated[int | None, typer.Option(help="Run this many rounds beyond the completed ones.")] = None,
    run_name: Annotated[str | None, typer.Option("--run", help="Run name (default: run.name).")] = None,
    force: Annotated[bool, typer.Option(
        help="Recompute every stage; also accepts a config that changes the run's model or environment.")] = False,
    overrides: Overrides = None,
    root: RootOption = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Validate the config and print the plan (rounds, D_0, splits, budget, differences "
                          "from the paper); run nothing.")] = False,
) -> None:
    """Run or continue a CoEvolve run in-process (the `coevolve` Prefect flow, on PREFECT_API_URL's server
    or a temporary local one). A run whose every stage is cached prints its rounds without starting Prefect."""
    from coevolve.flows.runs import all_cached, resolve_run, rounds_to_run

    try:  # check config and run before paying for torch and Prefect
        spec = resolve_run(config, run_name, overrides or [], force=force, root=root)
        if dry_run:
            from coevolve.flows.dry_run import dry_run as plan

            return typer.echo(plan(spec.config, spec.root, run=spec.run, rounds=rounds, more=more))
        ctx = spec.context()
        total = rounds_to_run(ctx, rounds, more)
        if not force and all_cached(ctx, total):
            return _print_finished(ctx, total)
        quiet_libraries()
        from coevolve.flows.coevolve import coevolve
        from coevolve.flows.prefect_api import prefect_api

        with prefect_api():
            result = coevolve(run=spec.run, rounds=total, force=force, spec=spec)
    except user_errors() as exc:
        fail(str(exc))
    _print_where(result["root"], result["run"])


def _print_finished(ctx, rounds: int) -> None:
    from coevolve.flows.summary import round_line, run_metrics
    from coevolve.flows.tracking import save_tracking_choice, track_rounds
    from coevolve.stages.round_plan import round_plan

    rows = run_metrics(ctx.store, rounds)
    for row in rows:
        typer.echo(round_line(row, [stage.name for stage in round_plan(ctx.config, row["round"])], computed=[]))
    if save_tracking_choice(ctx.spec, ctx.store.layout):  # the flow saves the whole config; nothing ran here
        typer.echo(f"note: tracking.report_to saved into {ctx.store.layout.config_path}; later runs keep it")
    track_rounds(ctx.config, ctx.store.layout, rows, spec=ctx.spec)  # rounds finished before tracking was on
    _print_where(str(ctx.store.layout.root), ctx.run)


def _print_where(root: str, run: str) -> None:
    from coevolve.storage.layout import root_option

    typer.echo(f"\nrun '{run}' is in {root}/run={run}/; inspect it with SQL (docs/sql.md):")
    typer.echo(f'  coevolve sql{root_option(root)} "SELECT round, source, count(*) AS episodes, '
               'avg(success::INT) AS success FROM trajectories GROUP BY ALL ORDER BY ALL"')


@app.command()
def serve(
    name: Annotated[str, typer.Option(help="Deployment name: the flow is served as coevolve/NAME.")] = "round",
    limit: Annotated[int | None, typer.Option(help="At most this many flow runs at once.")] = 1,
    root: RootOption = None,
) -> None:
    """Serve the `coevolve` flow as deployment coevolve/NAME from this process (needs a Prefect server:
    PREFECT_API_URL). Trigger it with `prefect deployment run coevolve/round -p config=... -p more=1`; its
    runs are stored under --root (default: COEVOLVE_HOME or runs/)."""
    require_prefect_api("serve")
    quiet_libraries()
    from coevolve.flows.serve import serve_deployment

    serve_deployment(name, limit=limit, root=root)


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
    config sections it touches recompute when they next run. What reads the rewritten stage is stale until
    then: the command names it, as `coevolve runs` does, and `coevolve run --run NAME` recomputes it."""
    from coevolve.flows.runs import check_round
    from coevolve.stages.round_plan import get_stage

    layout = run_layout(root, run_name)
    if not layout.config_path.exists():
        fail(f"no run '{run_name}' under {layout.root} ({layout.config_path} missing). List runs with "
              f"`coevolve runs`, or start this one with `coevolve run CONFIG --run {run_name}`.")
    try:
        stage_def = get_stage(name)
    except ValueError as exc:
        fail(f"{exc}. {_did_you_mean(name)}")
    from coevolve.storage.lock import run_lock

    try:
        check_round(layout, round_)
        with run_lock(layout, f"coevolve stage {name} --run {run_name} --round {round_}"):
            cfg = _stage_config(layout, overrides or [], force=force)
            quiet_libraries()
            record = _rerun_stage(stage_def, cfg, layout, round_, force=force)
    except user_errors() as exc:
        fail(str(exc))
    state = "cached" if record.cached else f"computed in {record.manifest.seconds:.1f} s"
    typer.echo(f"{name} round {round_}: {state}; key {record.manifest.key}")
    for ref in record.manifest.artifacts.values():  # where the file is now: a runs folder can be moved
        typer.echo(f"  {ref.name}: {ref.rows} rows -> {layout.artifact_path(round_, name, ref.name)}")
    from coevolve.flows.runs import stale_note

    if note := stale_note(layout):  # the stages that read what it rewrote
        typer.echo(note)


def _rerun_stage(stage_def, cfg, layout, round_: int, *, force: bool):
    """The stage in this process, as a `coevolve-stage` flow run when a Prefect API is configured."""
    from coevolve.flows.prefect_api import configured_api_url
    from coevolve.flows.run_context import open_run
    from coevolve.pipeline.runner import run_stage

    if not configured_api_url():
        return run_stage(stage_def, open_run(cfg, layout.run, layout.root), round_, force=force)
    from coevolve.flows.coevolve import coevolve_stage
    from coevolve.flows.prefect_api import prefect_api

    with prefect_api():
        result = coevolve_stage(stage_def.name, layout.run, round_, str(layout.root), force=force)
    from coevolve.pipeline.runner import StageRecord

    store = open_run(cfg, layout.run, layout.root).store
    return StageRecord(store.completed(round_, stage_def.name), cached=result["cached"])


@app.command("eval")
def evaluate(
    run_name: Annotated[str, typer.Option("--run", help="Run whose policy to evaluate.")],
    env_seed: Annotated[int | None, typer.Option(
        help="The environment's seed option for the tasks (one no run used); needed unless --env names "
             "another environment.")] = None,
    env: Annotated[str | None, typer.Option(
        help="Score on another environment (e.g. bfcl for a tool-world run: the paper's transfer row), with "
             "its default options (and --env-seed when given).")] = None,
    round_: Annotated[int | None, typer.Option("--round", help="Policy after this round (default: the last).")] = None,
    splits: Annotated[list[str] | None, typer.Option(
        "--split", help="Split to evaluate (repeatable; default: the run's eval.splits).")] = None,
    max_tasks: Annotated[int | None, typer.Option(help="At most this many tasks per split.")] = None,
    baseline: Annotated[bool, typer.Option(
        "--baseline", help="Also score the initial policy (the base model) on the same tasks, once per task "
                           "set; with the round's checkpoint pruned, only it.")] = False,
    root: RootOption = None,
) -> None:
    """Evaluate a run's policy on tasks it never met: drawn with another environment seed, or of another
    environment (--env); progress goes to stderr; the results go to ROOT/evaluations/RUN/, outside the run, as
    the `evaluations` artifact that `coevolve sql`, `coevolve runs` and the web view show
    (flows/reevaluate.py)."""
    from coevolve.flows.reevaluate import reevaluate
    from coevolve.flows.run_context import open_run
    from coevolve.flows.runs import load_saved_config

    layout = run_layout(root, run_name)
    if not layout.config_path.exists():
        fail(f"no run '{run_name}' under {layout.root} ({layout.config_path} missing). List runs with `coevolve runs`.")
    if max_tasks is not None and max_tasks < 1:
        fail(f"--max-tasks must be >= 1, got {max_tasks}")
    try:
        cfg = load_saved_config(layout)
        other = env is not None and env != cfg.env.name
        if not other and env_seed is None:
            fail(f"--env-seed: give a seed of {cfg.env.name} that no run used (e.g. 9001), or --env another "
                 f"environment")
        if other and not splits:
            fail(f"--split: name the splits of {env} to score (`coevolve env list` shows them)")
        wanted = splits or ([cfg.eval.splits] if isinstance(cfg.eval.splits, str) else list(cfg.eval.splits or []))
        seed = {} if env_seed is None else {"seed": env_seed}
        options = seed if other else {**cfg.env.options, **seed}
        quiet_libraries()
        found = reevaluate(open_run(cfg, layout.run, layout.root), round_=round_, options=options,
                           splits=wanted, max_tasks=max_tasks, root=layout.root, env=env, baseline=baseline,
                           report=lambda line: typer.echo(line, err=True))  # fmt: skip
    except (*user_errors(), ValueError) as exc:
        fail(str(exc))
    scored, base = found["round"], found["baseline"]
    if found["pruned"]:
        typer.echo(found["pruned"].split(";")[0] + "; scored the initial policy only")
    any_summary = scored or base
    each = f", {any_summary['samples']} sampled episodes each" if any_summary["samples"] > 1 else ""
    where = any_summary["env"] + (f", env seed {env_seed}" if env_seed is not None else "")
    for split, count in any_summary["tasks"].items():
        figures = [(f"{s['success'][split]:.1%}", f"policy after round {s['round']}" if s is scored else
                    "initial policy") for s in (scored, base) if s]  # fmt: skip
        if len(figures) == 1:
            typer.echo(f"{split}: success {figures[0][0]} of {count} tasks{each} ({figures[0][1]}, {where})")
        else:
            typer.echo(f"{split}: success {' vs '.join(f'{v} ({who})' for v, who in figures)} on the same "
                       f"{count} tasks{each} ({where})")
    for summary in (scored, base):
        if summary:
            typer.echo(f"rows in {summary['folder']}/")


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
        serve_machine(run_layout(root, run_name).run_dir, machine_rank, jobs=jobs,
                      report=lambda line: typer.echo(line, err=True))  # fmt: skip
    except ValueError as exc:
        fail(str(exc))


@app.command()
def fork(
    target: Annotated[str, typer.Option("--run", help="The new run's name.")],
    source: Annotated[str, typer.Option("--from", help="The run to copy stages from.")],
    rounds: Annotated[int, typer.Option(help="Consider the stages of the source's first ROUNDS rounds.")] = 1,
    config: Annotated[Path | None, typer.Option(
        help="The new run's config file (default: the source's saved config).")] = None,
    overrides: Overrides = None,
    root: RootOption = None,
) -> None:
    """Start a new run (--run) from the stages of another (--from) that its config (the other's, or
    --config, plus --set) would compute identically; `coevolve run --run NEW` then computes only the rest.
    E.g. `coevolve fork --from grpo-s0 --run coevolve-s0 --set evolve.every=1` shares round 0's rollout,
    update and evals."""
    from coevolve.config import load_config
    from coevolve.flows.fork import fork_run
    from coevolve.flows.runs import load_saved_config

    base = config or run_layout(root, source).config_path
    try:
        if not base.exists():
            fail(f"no run '{source}' under {root_of(root)} ({base} missing). List runs with `coevolve runs`.")
        cfg = (load_config(base, overrides or []) if config
               else load_saved_config(run_layout(root, source), overrides or []))  # fmt: skip
        unshared: list[str] = []
        copied = fork_run(cfg, root_of(root), source, target, rounds, unshared=unshared)
    except user_errors() as exc:
        fail(str(exc))
    typer.echo(f"run '{target}': {len(copied)} stages copied from '{source}'"
               + "".join(f"\n  round {r}: {stage}" for r, stage in copied))  # fmt: skip
    if unshared:
        typer.echo("not shared, computed when the run continues:" + "".join(f"\n  {line}" for line in unshared))
    typer.echo(f"continue it with `coevolve run --run {target} --rounds N` (the rest of each round is computed)")


def _did_you_mean(name: str) -> str:
    import difflib

    from coevolve.stages.round_plan import STAGES

    close = difflib.get_close_matches(name, list(STAGES), n=1)
    return f"Did you mean `{close[0]}`?" if close else "See `coevolve stage --help`."


def _stage_config(layout, overrides: list[str], *, force: bool):
    """The run's saved config; overrides are validated, then saved into it (with a note)."""
    from coevolve.flows.runs import check_compatible, load_saved_config, persist_overrides

    before = load_saved_config(layout)
    if not overrides:
        return before
    if not force:
        check_compatible(layout, load_saved_config(layout, overrides), config_source="--set")
    cfg = persist_overrides(layout, overrides)
    if cfg != before:
        typer.echo(f"note: saved {', '.join(overrides)} into {layout.config_path}; the flow and later stages "
                   f"of run '{layout.run}' use it (`coevolve run --run {layout.run}` continues with it)")
    return cfg


for command in (inspect_commands.sql, inspect_commands.runs, inspect_commands.compare, inspect_commands.evolution,
                inspect_commands.show, inspect_commands.ui):
    app.command()(command)
app.add_typer(env_app, name="env")
app.add_typer(models_app, name="models")
app.add_typer(engine_app, name="engine")
app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False)(bench)  # fmt: skip


def main() -> None:  # pragma: no cover - console entry point
    app(sys.argv[1:])
