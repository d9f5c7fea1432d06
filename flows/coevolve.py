"""The Prefect flow `coevolve`: loop the stages of each round, resuming from storage.

    coevolve run configs/test-tiny.yaml --rounds 2        # in-process, ephemeral Prefect API
    coevolve serve                                        # serve it as deployment coevolve/round
    prefect deployment run coevolve/round -p config=configs/test-tiny.yaml -p run=demo -p more=1

`rounds` is the total number of rounds the run should have: re-running the same command recomputes
nothing (every stage finds its manifest), a larger number continues the run. `more` runs that many
rounds beyond the ones the run has completed. Without `config`, an existing run continues with its saved
config. Each stage is a Prefect task through the one stage runner (`stages.runner.run_stage`); tasks
exchange manifests, not frames. Each round publishes Prefect artifacts (`flows.summary`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from coevolve.flows.runs import resolve_run, rounds_to_run
from coevolve.flows.summary import publish_round
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageRecord, run_stage
from coevolve.pipeline.stage import StageDef
from coevolve.stages import round_plan
from coevolve.storage.catalog import build_catalog
from coevolve.storage.parquet import write_text_atomic


@dataclass(frozen=True)
class RoundReport:
    round: int
    stages: dict[str, StageRecord]

    def line(self) -> str:
        out = {name: rec.manifest.outputs for name, rec in self.stages.items()}
        roll, upd, ev = out.get("rollout", {}), out.get("grpo_update", {}), out.get("evaluate", {})
        parts = [f"round {self.round}"]
        if roll:
            parts.append(f"train success {roll['success_rate']:.1%} reward {roll['mean_reward']:.3f} "
                         f"gen {roll['tokens_per_second']:.0f} tok/s")
        if "merge" in out:
            kinds = out.get("signals", {}).get("signals", {})
            fired = sum(kinds.values()) if isinstance(kinds, dict) else kinds
            parts.append(f"signals {fired} | +{out['merge'].get('added_tasks', 0)} tasks, "
                         f"|D| {out['merge'].get('dataset_size', '?')}")
        if upd:
            parts.append(f"loss {upd['loss']:+.4f} kl {upd['kl']:.4f}")
        parts += [f"{k.removesuffix('_success')} {v:.1%}" for k, v in ev.items() if k.endswith("_success")]
        cached = [n for n, rec in self.stages.items() if rec.cached]
        if cached:
            parts.append(f"cached: {', '.join(cached)}")
        return " | ".join(parts)


@task(name="stage", cache_policy=NO_CACHE, persist_result=False)
def stage_task(stage: StageDef, ctx: RunContext, round_: int, force: bool = False) -> StageRecord:
    return run_stage(stage, ctx, round_, force=force)


def save_resolved_config(ctx: RunContext) -> None:
    path = ctx.store.layout.config_path
    text = ctx.config.to_yaml()
    if path.exists() and path.read_text() != text and not ctx.quiet:
        print(f"note: {path} changes; stages whose config sections changed will recompute")
    write_text_atomic(text, path)


def _announce(line: str, *, quiet: bool) -> None:
    """The round's summary line: on stdout for people, in the flow run's log for the Prefect UI."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    if not quiet:
        print(line, flush=True)
    with contextlib.suppress(MissingContextError):  # called outside a flow run
        get_run_logger().info(line)


def run_rounds(ctx: RunContext, rounds: int, *, force: bool = False) -> list[RoundReport]:
    """Run rounds 0..rounds-1 of the run in `ctx` (completed stages are skipped)."""
    save_resolved_config(ctx)
    reports = []
    for round_ in range(rounds):
        records = {}
        for stage in round_plan(ctx.config, round_):
            records[stage.name] = stage_task.with_options(task_run_name=f"{stage.name}[{round_}]")(
                stage, ctx, round_, force=force
            )
        reports.append(RoundReport(round_, records))
        _announce(reports[-1].line(), quiet=ctx.quiet)
        if not all(rec.cached for rec in records.values()):
            publish_round(ctx, round_)
    _refresh_catalog(ctx)
    return reports


def _refresh_catalog(ctx: RunContext) -> None:
    """Rewrite the DuckDB catalog; a catalog problem (corrupt file elsewhere) warns, never fails the run."""
    import duckdb

    from coevolve.flows.render import explain_query_error

    try:
        build_catalog(ctx.store.layout.root)
    except duckdb.Error as exc:
        _announce(f"warning: catalog not rebuilt: {explain_query_error(exc, ctx.store.layout.root)}", quiet=False)


@flow(name="coevolve")
def coevolve(
    config: str | None = None,
    run: str | None = None,
    rounds: int | None = None,
    overrides: list[str] | None = None,
    more: int | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Run or continue a CoEvolve run.

    config: YAML config path (default: the run's saved config.yaml; then `run` is required).
    run: run name (default: the config's run.name).
    rounds: total rounds the run should have (default: run.rounds).
    overrides: config overrides KEY=VALUE.
    more: run this many rounds beyond the ones the run has completed (instead of `rounds`).
    force: recompute every stage, and accept a config that changes the run's model or environment.
    """
    cfg, name, root = resolve_run(config, run, overrides or [], force=force)
    return run_context(RunContext.create(cfg, name, root), rounds=rounds, more=more, force=force)


def run_context(ctx: RunContext, *, rounds: int | None = None, more: int | None = None,
                force: bool = False) -> dict[str, Any]:
    """Run or continue the run of `ctx` (inside the caller's flow run, if any): what `coevolve` returns.
    Tests hand in a context whose engine and teacher factories are fakes."""
    reports = run_rounds(ctx, rounds_to_run(ctx, rounds, more), force=force)
    return {
        "run": ctx.run,
        "root": str(ctx.store.layout.root),
        "rounds": [{name: ("cached" if rec.cached else "computed") for name, rec in rep.stages.items()}
                   for rep in reports],
    }
