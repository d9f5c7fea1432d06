"""The Prefect flow `coevolve`: loop the stages of each round, resuming from storage.

    coevolve run configs/test-tiny.yaml --rounds 2        # in-process flow (temporary Prefect API)
    coevolve serve                                        # serve it as deployment coevolve/round
    prefect deployment run coevolve/round -p config=configs/test-tiny.yaml -p run=demo -p more=1

`rounds` is the total number of rounds the run should have: re-running the same command recomputes
nothing (every stage finds its manifest), a larger number continues the run. `more` runs that many
rounds beyond the ones the run has completed. Without `config`, an existing run continues with its saved
config. Each stage is a Prefect task named after it (`rollout`, `signals`, ...), tagged with the run and
the round, running the one stage runner (`pipeline.runner.run_stage`); a stage whose manifest matches
ends in a `Cached` state. Tasks exchange manifests, not frames. Each round logs its summary line to the
flow run, publishes Prefect artifacts (`flows.summary`) and sends its metrics to the configured experiment
trackers (`flows.tracking`).
"""

# No `from __future__ import annotations`: the flow's parameter types (`RunSpec`) must be objects, not names.
# A served run executes the flow in a subprocess that receives the function pickled by value, with only the
# globals its body uses; Prefect validates the parameters from the annotations there.

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from coevolve.flows.run_context import open_run
from coevolve.flows.runs import RunError, RunSpec, load_saved_config, resolve_run, rounds_to_run
from coevolve.flows.summary import publish_round, round_line, round_metrics
from coevolve.flows.tracking import track_rounds
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageRecord, is_cached, run_stage, stage_key
from coevolve.pipeline.stage import StageDef
from coevolve.stages.round_plan import rollout_ahead_beside, round_plan
from coevolve.storage.catalog import build_catalog
from coevolve.storage.parquet import write_text_atomic


@dataclass(frozen=True)
class RoundReport:
    round: int
    stages: dict[str, StageRecord]

    def cached(self) -> list[str]:
        return [name for name, rec in self.stages.items() if rec.cached]


@task(cache_policy=NO_CACHE, persist_result=False)
def stage_task(stage: StageDef, ctx: RunContext, round_: int, force: bool = False, threads: int = 0) -> Any:
    """One stage run; a cache hit is reported as a `Cached` state holding the record. `threads` > 0: the
    torch math threads of this task's thread (a stage run beside another, `RolloutAhead`)."""
    from prefect.logging import get_run_logger
    from prefect.states import Completed

    if threads:
        import torch

        torch.set_num_threads(threads)
    record = run_stage(stage, ctx, round_, force=force)
    logger = get_run_logger()
    if record.cached:
        logger.info(f"{stage.name} round {round_}: cached (key {record.manifest.key})")
        return Completed(name="Cached", data=record, message=f"manifest key {record.manifest.key} matches")
    rows = ", ".join(f"{ref.name} {ref.rows}" for ref in record.manifest.artifacts.values())
    logger.info(f"{stage.name} round {round_}: computed in {record.manifest.seconds:.1f} s ({rows})")
    return record


def run_stage_in_flow(stage: StageDef, ctx: RunContext, round_: int, *, force: bool = False) -> StageRecord:
    """`stage` as a Prefect task named after it, tagged with the run and the round; its record (a cached
    stage's too: its `Cached` state holds it)."""
    return tagged_task(stage, ctx, round_)(stage, ctx, round_, force=force, return_state=True).result()


def tagged_task(stage: StageDef, ctx: RunContext, round_: int, *tags: str) -> Any:
    """`stage_task` named after `stage` and the round, tagged with the run, the round and `tags`."""
    return stage_task.with_options(name=stage.name, task_run_name=f"{stage.name}[{round_}]",
                                   tags=[f"run:{ctx.run}", f"round:{round_}", "coevolve", *tags])  # fmt: skip


def save_resolved_config(ctx: RunContext) -> None:
    path = ctx.store.layout.config_path
    text = ctx.spec.to_yaml()
    if path.exists() and path.read_text() != text and not ctx.quiet:
        print(f"note: {path} changes; stages whose config fields changed will recompute")
    write_text_atomic(text, path)


def announce(line: str, *, quiet: bool) -> None:
    """A line for people on stdout, and in the flow run's log for the Prefect UI (when in a flow run)."""
    from prefect.context import FlowRunContext
    from prefect.logging import get_run_logger

    if not quiet:
        print(line, flush=True)
    if FlowRunContext.get() is not None:
        get_run_logger().info(line)


def run_rounds(ctx: RunContext, rounds: int, *, force: bool = False) -> list[RoundReport]:
    """Run rounds 0..rounds-1 of the run in `ctx` (completed stages are skipped)."""
    save_resolved_config(ctx)
    reports, size, ahead = [], None, None
    for round_ in range(rounds):
        records, ahead = run_round(ctx, round_, rounds, ahead, force=force)
        reports.append(RoundReport(round_, records))
        metrics = round_metrics(ctx.store, round_, size)
        size = metrics["dataset_size"]
        computed = [name for name, record in records.items() if not record.cached]
        announce(round_line(metrics, reports[-1].cached(), computed), quiet=ctx.quiet)
        if len(reports[-1].cached()) < len(records):
            publish_round(ctx.store, round_)
        track_rounds(ctx.config, ctx.store.layout, [metrics], spec=ctx.spec)
    refresh_catalog(ctx)
    return reports


class RolloutAhead:
    """Round r+1's rollout running in a task thread of the flow while round r's update computes in the flow's
    own thread. The two share the CPU's math threads: each sets its share with `torch.set_num_threads` (per
    thread under OpenMP), the rollout half (at least one), the update the rest, until the rollout is
    awaited; then the flow's thread takes them all back. The rollout's model is loaded before it is submitted
    (building models in two threads at once is not safe)."""

    def __init__(self, future: Any, threads: int) -> None:
        self.future, self.threads = future, threads

    @classmethod
    def submit(cls, ctx: RunContext, round_: int, *, force: bool = False) -> "RolloutAhead":
        import torch

        from coevolve.stages.round_plan import get_stage

        threads = torch.get_num_threads()
        share = max(1, threads // 2)
        rollout = get_stage("rollout")
        if force or is_cached(rollout, ctx, round_, stage_key(rollout, ctx, round_)) is None:
            # its model is built here, in the flow's thread: transformers patches torch's module construction
            # while it builds one, so two models built at once (the update's, beside it) break each other
            rollout.reads["policy"].load(ctx, round_)
        task = tagged_task(rollout, ctx, round_, "ahead")
        future = task.submit(rollout, ctx, round_, force=force, threads=share)
        torch.set_num_threads(max(1, threads - share))
        return cls(future, threads)

    def result(self) -> StageRecord:
        import torch

        try:
            return self.future.result()
        finally:
            torch.set_num_threads(self.threads)

    def settle(self) -> None:
        """Wait for the rollout to end, whatever its outcome (the round beside it failed)."""
        import torch

        self.future.wait()
        torch.set_num_threads(self.threads)


def run_round(ctx: RunContext, round_: int, rounds: int, ahead: RolloutAhead | None, *,
              force: bool = False) -> tuple[dict[str, StageRecord], RolloutAhead | None]:
    """The stages of round `round_`, in order; its rollout is `ahead`'s when the previous round started it.
    With `rollout.max_staleness` > 0, round `round_`+1's rollout is submitted as a Prefect task beside this
    round's update (`stages.round_plan.rollout_ahead_beside`): what is returned for the next round to await."""
    beside = rollout_ahead_beside(ctx.config, round_) if round_ + 1 < rounds else None
    records: dict[str, StageRecord] = {}
    try:
        for stage in round_plan(ctx.config, round_):
            if stage.name == "rollout" and ahead is not None:
                records[stage.name], ahead = ahead.result(), None
                continue
            if stage is beside:
                ahead = RolloutAhead.submit(ctx, round_ + 1, force=force)
            records[stage.name] = run_stage_in_flow(stage, ctx, round_, force=force)
    except BaseException:
        if ahead is not None:  # never leave it writing the run once the flow lets go of the run's lock
            ahead.settle()
        raise
    return records, ahead


def refresh_catalog(ctx: RunContext) -> None:
    """Rewrite the DuckDB catalog; a catalog problem (corrupt file elsewhere, a full disk) warns, never fails
    the run."""
    import duckdb

    from coevolve.flows.render import explain_query_error
    from coevolve.run_files import DiskFullError

    try:
        build_catalog(ctx.store.layout.root)
    except duckdb.Error as exc:
        announce(f"warning: catalog not rebuilt: {explain_query_error(exc, ctx.store.layout.root)}", quiet=False)
    except DiskFullError as exc:
        announce(f"warning: catalog not rebuilt: {exc}", quiet=False)


def flow_run_label(parameters: dict[str, Any]) -> str:
    """A `coevolve` flow run's name in Prefect: the run, and how far it goes ("demo +1 round (round 2)",
    "demo +2 rounds (rounds 2..3)", "demo to round 4"), instead of a random pair of words; the config's stem
    when no run is named."""
    spec = parameters.get("spec")
    named = spec.get("run") if isinstance(spec, dict) else getattr(spec, "run", None)
    run = parameters.get("run") or named or Path(parameters.get("config") or "run").stem
    more, rounds = parameters.get("more"), parameters.get("rounds")
    if more:
        start = finished_rounds(parameters, str(run))
        span = "" if start is None else f" (round {start})" if more == 1 else f" (rounds {start}..{start + more - 1})"
        return f"{run} +{more} round{'s' if more != 1 else ''}{span}"
    return f"{run} to round {rounds}" if rounds else str(run)


def finished_rounds(parameters: dict[str, Any], run: str) -> int | None:
    """For a flow run's name: the leading rounds of `run` whose update has a manifest and every stage
    folder one (so `more` rounds start at this round); None when where the run lives cannot be told."""
    import yaml

    from coevolve.config import find_config
    from coevolve.storage.layout import MANIFEST, RunLayout, storage_root

    spec, config = parameters.get("spec"), parameters.get("config")
    try:
        if isinstance(spec, dict):  # as Prefect hands parameters over
            configured, root = (spec.get("config") or {}).get("storage", {}).get("root"), spec.get("root")
        elif spec is not None:
            configured, root = spec.config.storage.root, spec.root
        else:
            saved = yaml.safe_load(find_config(config).read_text()) if config else None
            configured, root = (saved or {}).get("storage", {}).get("root"), None
        layout = RunLayout(storage_root(parameters.get("root") or root, configured), run)
        done = 0
        while layout.manifest_path(done, "grpo_update").is_file() and all(
                (stage / MANIFEST).is_file() for stage in (layout.run_dir / f"round={done}").glob("stage=*")):  # fmt: skip
            done += 1
        return done
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):  # a name, never a failure
        return None


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    return flow_run_label(dict(flow_run.parameters or {}))


@flow(name="coevolve", flow_run_name=_flow_run_name)
def coevolve(
    config: str | None = None,
    run: str | None = None,
    rounds: int | None = None,
    overrides: list[str] | None = None,
    more: int | None = None,
    force: bool = False,
    root: str | None = None,
    spec: RunSpec | None = None,
) -> dict[str, Any]:
    """Run or continue a CoEvolve run.

    config: YAML config path (default: the run's saved config.yaml; then `run` is required).
    run: run name (default: the config's run.name).
    rounds: total rounds the run should have (default: run.rounds).
    overrides: config overrides KEY=VALUE.
    more: run this many rounds beyond the ones the run has completed (instead of `rounds`).
    force: recompute every stage, and accept a config that changes the run's model or environment.
    root: the storage root (default: COEVOLVE_HOME, else the config's storage.root, else runs/).
    spec: the run already resolved (`flows.runs.resolve_run`, as `coevolve run` does): then config,
        overrides and root are left out, and nothing is read or resolved again.
    """
    if spec is None:
        spec = resolve_run(config, run, overrides or [], force=force, root=root)
    elif config is not None or overrides or root is not None or run not in (None, spec.run):
        raise RunError("give the flow either a resolved spec or config/run/overrides/root, not both")
    return run_context(spec.context(), rounds=rounds, more=more, force=force)


def run_context(ctx: RunContext, *, rounds: int | None = None, more: int | None = None,
                force: bool = False) -> dict[str, Any]:
    """Run or continue the run of `ctx` (inside the caller's flow run, if any), holding the run's write lock:
    what `coevolve` returns. Tests hand in a context whose engine and teacher factories are fakes."""
    from coevolve.storage.lock import run_lock

    with run_lock(ctx.store.layout, f"coevolve flow, run {ctx.run}"):
        reports = run_rounds(ctx, rounds_to_run(ctx, rounds, more), force=force)
    return {
        "run": ctx.run,
        "root": str(ctx.store.layout.root),
        "rounds": [{name: ("cached" if rec.cached else "computed") for name, rec in rep.stages.items()}
                   for rep in reports],
    }


@flow(name="coevolve-stage")
def coevolve_stage(stage: str, run: str, round: int, root: str, force: bool = False) -> dict[str, Any]:
    """Re-run one stage of a run from its cached inputs (`coevolve stage`, when a Prefect API is configured;
    the command holds the run's lock)."""
    from coevolve.stages.round_plan import get_stage
    from coevolve.storage.layout import RunLayout

    layout = RunLayout(Path(root), run)
    ctx = open_run(load_saved_config(layout), run, layout.root)
    record = run_stage_in_flow(get_stage(stage), ctx, round, force=force)
    return {"cached": record.cached, "key": record.manifest.key}
