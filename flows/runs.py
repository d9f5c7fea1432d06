"""Opening a run: which config it uses, whether a new config may continue it, how far it got.

    spec = resolve_run("configs/test-tiny.yaml", run=None, overrides=[])   # a config file
    spec = resolve_run(None, run="demo", overrides=["rollout.k=4"])         # the run's own config
    ctx = spec.context()                                                     # its RunContext
    total = rounds_to_run(ctx, rounds=None, more=1)                          # the next round

A run is resolved once (`RunSpec`: config, name, storage root): the CLI resolves it, checks it, and hands it
to the flow, which then reads no file and resolves nothing again.

A run's resolved config is saved as `run=<run>/config.yaml`. Continuing a run with a config that changes
what the run *is* (the policy model or the environment) would silently recompute every stage over the old
artifacts, so it is refused unless forced (`IDENTITY_FIELDS`). Any other change is fine: the stages whose
config sections changed recompute, the rest stay cached.

The saved config is read on every continue (`load_saved_config`): an empty, partial or unparsable file is
refused naming it, never read as the package defaults, which would recompute every stage under a config
nobody chose and overwrite the file with it.

What a run holds on disk (`disk_use`, the `disk` column of `coevolve runs`) is mostly its checkpoints: each
kept one is the weights in the training dtype, plus twice that in AdamW state in the newest two
(`rl.checkpoint`).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from coevolve.config import CoevolveConfig, load_config, parse_config
from coevolve.flows.run_context import open_run
from coevolve.flows.validate import check_run_config
from coevolve.pipeline.context import RunContext
from coevolve.run_files import human_size
from coevolve.stages.round_plan import round_plan
from coevolve.storage.layout import RunLayout, storage_root
from coevolve.storage.staleness import stale_stages

IDENTITY_FIELDS = ("model.name", "env.name")
"""Config fields that define a run: changing one mid-run needs a new run name or `--force`."""

SAVED_SECTIONS = ("run", "model", "env", "dataset", "rollout", "train", "eval", "evolve")
"""Sections every saved config has held since the first one: a file without one of them (or with it empty)
was emptied, cut or hand-edited. Sections added since (`warm_start`, ...) may be missing from an older run's
file and take their defaults."""


class RunError(ValueError):
    """A run that cannot be opened or continued as asked; the message says which command fixes it."""


class RunSpec(BaseModel):
    """A run resolved once: its config (a file plus overrides, or the run's saved one), its name and its
    storage root. The `coevolve` flow takes it as its `spec` parameter, so Prefect records the config the
    run used on the flow run."""

    model_config = ConfigDict(frozen=True)
    config: CoevolveConfig
    run: str
    root: Path

    def context(self, **options: Any) -> RunContext:
        """The run's `RunContext` (`options`: its test seams, e.g. `teacher_factory`)."""
        return open_run(self.config, self.run, self.root, **options)


def _field(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part, {}) if isinstance(data, dict) else {}
    return data


def identity_changes(saved: dict[str, Any], new: CoevolveConfig) -> list[str]:
    """`field: old -> new` for each identity field that `new` changes relative to the saved config."""
    fresh = new.model_dump(mode="json")
    return [f"{f}: {_field(saved, f)!r} -> {_field(fresh, f)!r}" for f in IDENTITY_FIELDS
            if _field(saved, f) != _field(fresh, f)]


def saved_config_data(layout: RunLayout) -> dict[str, Any]:
    """The run's saved config as parsed YAML; `RunError` naming the file when it is unparsable, empty or
    partial (a `SAVED_SECTIONS` section missing or empty). Nothing is deleted or rewritten."""
    path = layout.config_path
    restore = ("nothing was changed; put the run's config back in that file (e.g. a copy of the config file it "
               "was started from, with the --set values it ran with), or start a new run")  # fmt: skip
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        problem = " ".join(str(exc).split())
        raise RunError(f"{path}: the saved config of run '{layout.run}' is not valid YAML ({problem}); "
                       f"{restore}") from None
    if not data:
        raise RunError(f"{path}: the saved config of run '{layout.run}' is empty; {restore}")
    if not isinstance(data, dict):
        raise RunError(f"{path}: the saved config of run '{layout.run}' is not a mapping of sections; {restore}")
    missing = [s for s in SAVED_SECTIONS if not isinstance(data.get(s), dict) or not data[s]]
    if missing:
        raise RunError(f"{path}: the saved config of run '{layout.run}' is partial (no {', '.join(missing)} "
                       f"section); {restore}")
    return data


def load_saved_config(layout: RunLayout, overrides: list[str] | tuple[str, ...] = ()) -> CoevolveConfig:
    """The run's saved config plus overrides, checked (`saved_config_data`) before anything reads it."""
    return parse_config(saved_config_data(layout), source=str(layout.config_path), overrides=overrides)


def check_compatible(layout: RunLayout, config: CoevolveConfig, *, config_source: str) -> None:
    """Refuse a config that changes an identity field of an existing run (or whose saved config is broken:
    there is nothing to compare with)."""
    if not layout.config_path.exists():
        return
    saved = saved_config_data(layout)
    changes = identity_changes(saved, config)
    if changes:
        raise RunError(
            f"{config_source} changes what run '{layout.run}' is ({'; '.join(changes)}): its saved config "
            f"is {layout.config_path}. Continuing would recompute every stage and replace the run's history. "
            f"Start a new run under another name instead (e.g. `--run {layout.run}-2`), or replace this run's "
            f"artifacts on purpose with `--force`."
        )


def resolve_run(
    config: str | Path | None, run: str | None, overrides: list[str], *, force: bool = False,
    root: str | Path | None = None,
) -> RunSpec:
    """The config, run name and storage root of a run to start or continue (`root`: an explicit storage
    root, as `--root`; see `storage_root`).

    With `config`, the file (plus overrides) is the run's config; an existing run must stay compatible.
    Without it, the run's saved `config.yaml` (plus overrides) continues the run."""
    if config is None:
        if not run:
            raise RunError("give a config file or the name of an existing run (`--run NAME`); see `coevolve runs`")
        layout = _layout(storage_root(root), run, "--run")
        if not layout.config_path.exists():
            raise RunError(
                f"no run '{run}' under {layout.root} ({layout.config_path} missing). Start it from a config: "
                f"`coevolve run configs/demo.yaml --run {run}`; list runs with `coevolve runs`."
            )
        cfg = load_saved_config(layout, overrides)
        check_run_config(cfg)
        return RunSpec(config=cfg, run=run, root=layout.root)
    cfg = load_config(config, overrides)
    check_run_config(cfg)
    name = run or cfg.run.name
    layout = _layout(storage_root(root, configured=cfg.storage.root), name, "--run" if run else "run.name")
    if not force:
        check_compatible(layout, cfg, config_source=str(config))
    return RunSpec(config=cfg, run=name, root=layout.root)


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
    """Total rounds the run should have: `rounds`, or `more` beyond the completed ones, or else `run.rounds`
    but never fewer than the completed ones (a run taken to 3 rounds with `--rounds 3` or `--more` stays 3
    rounds when continued without it) nor than the last round holding a stale stage (`storage.staleness`),
    so that a run continued without `--rounds` recomputes every stale stage."""
    if rounds is not None and more is not None:
        raise RunError("give either rounds (the total) or more (rounds beyond the completed ones), not both")
    if more is not None:
        if more < 0:
            raise RunError(f"more must be >= 0, got {more}")
        return completed_rounds(ctx) + more
    if rounds is None:
        stale = [round_ for _, round_, _ in stale_stages(ctx.store.layout.run_dir)]
        rounds = max(ctx.config.run.rounds, completed_rounds(ctx), max(stale, default=-1) + 1)
    if rounds < 1:
        raise RunError(f"rounds must be >= 1, got {rounds}")
    return rounds


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

    cfg = load_saved_config(layout, overrides)
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


def stale_note(layout: RunLayout, stale: list[tuple[str, int, str]] | None = None) -> str | None:
    """One line on a run's stale stages (`storage.staleness.stale_stages`, or those given) and the command
    that recomputes them, or None:

        run 'demo': 6 stale stages, from round 0 (grpo_update: reads round 0 rollout's samples, rewritten
        since it ran); `coevolve run --run demo` recomputes them
    """
    stale = stale_stages(layout.run_dir) if stale is None else stale
    if not stale:
        return None
    stage, round_, why = stale[0]
    count = f"{len(stale)} stale stage{'s' if len(stale) != 1 else ''}"
    return (f"run '{layout.run}': {count}, from round {round_} ({stage}: {why}); `coevolve run --run "
            f"{layout.run}` recomputes them")


@dataclass(frozen=True)
class DiskUse:
    """Bytes of the files under a folder (`disk_use`), each file once however many hard links it has there."""

    total: int
    checkpoints: int
    """Of `total`, those under a `checkpoints/` folder (weights, optimizer state, tokenizer)."""
    shared: int
    """Of `total`, files hard-linked from elsewhere too (a fork's checkpoints, a `cp -al` snapshot): deleting
    the folder frees that much less."""


def disk_use(folder: Path) -> DiskUse:
    """What the regular files under `folder` (a run's folder, or a whole storage root) take: apparent sizes,
    as `du --apparent-size` counts them. A symlink is neither followed nor counted; a file removed while
    counting (a checkpoint being pruned) is skipped."""
    files: dict[tuple[int, int], tuple[os.stat_result, bool]] = {}  # by (device, inode): hard links once
    links_here: Counter[tuple[int, int]] = Counter()
    for parent, _, names in os.walk(folder):  # never follows a link to a folder
        in_checkpoints = "checkpoints" in Path(parent).relative_to(folder).parts
        for name in names:
            try:
                found = os.lstat(os.path.join(parent, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(found.st_mode):
                files.setdefault((found.st_dev, found.st_ino), (found, in_checkpoints))
                links_here[found.st_dev, found.st_ino] += 1
    return DiskUse(total=sum(f.st_size for f, _ in files.values()),
                   checkpoints=sum(f.st_size for f, kept in files.values() if kept),
                   shared=sum(f.st_size for key, (f, _) in files.items() if f.st_nlink > links_here[key]))


def runs_disk(root: Path, runs: list[str]) -> tuple[dict[str, str], list[str]]:
    """What `coevolve runs` says of disk use: each run's size (`3.2 GB`), and the lines under the table: the
    storage root's total (each file once) and, per run that has some, the bytes it shares through hard links
    with files outside its folder (a fork's checkpoints, a `cp -al` snapshot), which deleting it does not free."""
    uses = {run: disk_use(RunLayout(root, run).run_dir) for run in runs}
    whole = disk_use(root)
    lines = [f"{root}: {human_size(whole.total)} on disk, {human_size(whole.checkpoints)} of it checkpoints"]
    lines += [f"run '{run}': {human_size(use.shared)} of its {human_size(use.total)} hard-linked with files "
              f"outside its folder too (a fork's or a copy's), which deleting it does not free"
              for run, use in uses.items() if use.shared]  # fmt: skip
    return {run: human_size(use.total) for run, use in uses.items()}, lines
