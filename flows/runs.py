"""Opening a run: which config it uses, whether a new config may continue it, how far it got.

    cfg, run, root = resolve_run("configs/test-tiny.yaml", run=None, overrides=[])   # a config file
    cfg, run, root = resolve_run(None, run="demo", overrides=["rollout.k=4"])         # the run's own config
    total = rounds_to_run(ctx, rounds=None, more=1)                                    # the next round

A run's resolved config is saved as `run=<run>/config.yaml`. Continuing a run with a config that changes
what the run *is* (the policy model or the environment) would silently recompute every stage over the old
artifacts, so it is refused unless forced (`IDENTITY_FIELDS`). Any other change is fine: the stages whose
config sections changed recompute, the rest stay cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from coevolve.config import CoevolveConfig, load_config
from coevolve.flows.validate import check_run_config
from coevolve.pipeline.context import RunContext
from coevolve.stages import round_plan
from coevolve.storage.layout import RunLayout, storage_root

IDENTITY_FIELDS = ("model.name", "env.name")
"""Config fields that define a run: changing one mid-run needs a new run name or `--force`."""


class RunError(ValueError):
    """A run that cannot be opened or continued as asked; the message says which command fixes it."""


def _field(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


def identity_changes(saved: dict[str, Any], new: CoevolveConfig) -> list[str]:
    """`field: old -> new` for each identity field that `new` changes relative to the saved config."""
    fresh = new.model_dump(mode="json")
    return [f"{f}: {_field(saved, f)!r} -> {_field(fresh, f)!r}" for f in IDENTITY_FIELDS
            if _field(saved, f) != _field(fresh, f)]


def check_compatible(layout: RunLayout, config: CoevolveConfig, *, config_source: str) -> None:
    """Refuse a config that changes an identity field of an existing run."""
    if not layout.config_path.exists():
        return
    saved = yaml.safe_load(layout.config_path.read_text()) or {}
    changes = identity_changes(saved, config)
    if changes:
        raise RunError(
            f"{config_source} changes what run '{layout.run}' is ({'; '.join(changes)}): its saved config "
            f"is {layout.config_path}. Continuing would recompute every stage and replace the run's history. "
            f"Start a new run under another name instead (e.g. `--run {layout.run}-2`), or replace this run's "
            f"artifacts on purpose with `--force`."
        )


def resolve_run(
    config: str | Path | None, run: str | None, overrides: list[str], *, force: bool = False
) -> tuple[CoevolveConfig, str, Path]:
    """The config, run name and storage root of a run to start or continue.

    With `config`, the file (plus overrides) is the run's config; an existing run must stay compatible.
    Without it, the run's saved `config.yaml` (plus overrides) continues the run."""
    if config is None:
        if not run:
            raise RunError("give a config file or the name of an existing run (`--run NAME`); see `coevolve runs`")
        layout = _layout(storage_root(), run, "--run")
        if not layout.config_path.exists():
            raise RunError(
                f"no run '{run}' under {layout.root} ({layout.config_path} missing). Start it from a config: "
                f"`coevolve run configs/demo.yaml --run {run}`; list runs with `coevolve runs`."
            )
        cfg = load_config(layout.config_path, overrides)
        check_run_config(cfg)
        return cfg, run, layout.root
    cfg = load_config(config, overrides)
    check_run_config(cfg)
    name = run or cfg.run.name
    layout = _layout(storage_root(configured=cfg.storage.root), name, "--run" if run else "run.name")
    if not force:
        check_compatible(layout, cfg, config_source=str(config))
    return cfg, name, layout.root


def _layout(root: Path, run: str, field: str) -> RunLayout:
    """The run's folder; a run name that cannot be one is a `RunError` naming where it came from."""
    try:
        return RunLayout(root, run)
    except ValueError as exc:
        raise RunError(f"{field}: {exc}") from None


def completed_rounds(ctx: RunContext) -> int:
    """Leading rounds 0..n-1 whose every planned stage has a manifest (finished, possibly stale)."""
    n = 0
    while all(ctx.store.manifest(n, s.name) is not None for s in round_plan(ctx.config, n)):
        n += 1
    return n


def rounds_to_run(ctx: RunContext, rounds: int | None, more: int | None) -> int:
    """Total rounds the run should have: `rounds`, or `more` beyond the completed ones, or `run.rounds`."""
    if rounds is not None and more is not None:
        raise RunError("give either rounds (the total) or more (rounds beyond the completed ones), not both")
    if more is not None:
        if more < 0:
            raise RunError(f"more must be >= 0, got {more}")
        return completed_rounds(ctx) + more
    total = rounds if rounds is not None else ctx.config.run.rounds
    if total < 1:
        raise RunError(f"rounds must be >= 1, got {total}")
    return total


def check_round(layout: RunLayout, round_: int) -> None:
    """Refuse a round the run has not reached (its stages would lack their inputs)."""
    rounds = layout.rounds()
    if round_ < 0 or round_ not in rounds:
        have = f"rounds {rounds[0]}..{rounds[-1]}" if rounds else "no rounds yet"
        raise RunError(
            f"run '{layout.run}' has {have}, not round {round_}. Re-run a stage of an existing round, or "
            f"continue the run by one round with `coevolve run --run {layout.run} --more 1`."
        )


def persist_overrides(layout: RunLayout, overrides: list[str]) -> CoevolveConfig:
    """Apply overrides to a run's saved config and save it back, so later stages and the flow see them."""
    from coevolve.storage.parquet import write_text_atomic

    cfg = load_config(layout.config_path, overrides)
    write_text_atomic(cfg.to_yaml(), layout.config_path)
    return cfg



def all_cached(ctx: RunContext, rounds: int) -> bool:
    """Whether every stage of rounds 0..rounds-1 is complete with its current cache key (nothing to compute):
    keys come from manifests, ids and versions, so no model is loaded and no Prefect API is needed."""
    from coevolve.pipeline.runner import is_cached, stage_key
    from coevolve.storage.parquet import ArtifactError

    try:
        return all(is_cached(stage, ctx, r, stage_key(stage, ctx, r)) is not None
                   for r in range(rounds) for stage in round_plan(ctx.config, r))  # fmt: skip
    except ArtifactError:  # an input of a later stage is not there yet
        return False
