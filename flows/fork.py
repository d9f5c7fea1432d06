"""Fork a run: start a new run with the stages of another run that its config would compute identically.

    coevolve fork --from learning-grpo-s0 --run learning-coevolve-s0 --rounds 1 --set evolve.every=1
    coevolve run --run learning-coevolve-s0 --rounds 3    # computes only what the fork did not copy

Two runs that differ only in what happens after round 0 (GRPO against CoEvolve: the data evolves from
round 0 on, but round 0's rollout, update and evaluation do not depend on it) compute the same stages
at first. A fork copies those instead of computing them again. A stage of round r is copied when

1. its source manifest is complete and current, and the target's config gives it the same cache key
   over the source's inputs (so the config change does not touch it);
2. the target already holds what it reads: its upstream stages of the round were copied, and so was
   every stage of the earlier rounds (a round reads what they compute: the merged dataset, the policy);
3. its artifacts are ledger rows whose ids can be re-derived for the target run (`FORKABLE`).

Copies get the target's run name and ids (trajectory and group ids hash the run name, `agents.ledger`),
grpo_update's checkpoint is hard-linked, and the manifest records its origin (`forked_from`) and the
source's compute `seconds`, so the target's stage costs read as what computing them takes. The target
computes every other stage when it runs; a later change upstream recomputes the copies like any stage.
Each stage it could not share is named with why (`unshared`): not computed in the source, stale there, a
config field that changes it, an artifact a fork does not copy, a checkpoint pruned, an input it lacks.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa

from coevolve.agents.ledger import group_id, trajectory_id
from coevolve.config import CoevolveConfig
from coevolve.core import content_hash
from coevolve.flows.run_context import open_run
from coevolve.flows.runs import RunError, load_saved_config
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import is_cached, stage_key
from coevolve.pipeline.stage import StageDef
from coevolve.run_files import atomic_file, refuse_links
from coevolve.stages.round_plan import round_plan
from coevolve.storage.layout import RunLayout, checkpoint_name
from coevolve.storage.lock import run_lock
from coevolve.storage.manifest import Manifest
from coevolve.storage.parquet import ArtifactError, write_text_atomic
from coevolve.storage.store import RunStore

FORKABLE = frozenset({"trajectories", "steps", "samples", "updates", "evals", "tasks", "datasets"})
"""Artifacts a fork can copy: the rollout ledger, updates, evaluations and the seed dataset."""
_ID_COLUMNS = ("trajectory_id", "group_id", "sample_id")

Copied = tuple[int, str]
"""(round, stage) of a copied stage run."""
Shared = tuple[Manifest, str]
"""A stage run that can be copied: (its source manifest, its cache key in the target)."""


def fork_run(config: CoevolveConfig, root: Path, source: str, target: str, rounds: int, *,
             unshared: list[str] | None = None) -> list[Copied]:  # fmt: skip
    """Create run `target` (with `config`) holding copies of the stages of `source`'s first `rounds`
    rounds that it would compute identically; returns the copied (round, stage) pairs. Each stage of those
    rounds it does not copy is a line appended to `unshared`: `round R STAGE: recomputed, WHY`."""
    try:
        source_layout, target_layout = RunLayout(root, source), RunLayout(root, target)
    except ValueError as exc:  # a run name that cannot be a folder
        raise RunError(str(exc)) from exc
    if not source_layout.config_path.exists():
        missing = source_layout.config_path
        raise RunError(f"no run '{source}' under {root} ({missing} missing): see `coevolve runs`")
    if target_layout.rounds():
        raise RunError(f"run '{target}' has stages already ({target_layout.run_dir}): fork into a new name")
    if rounds < 1:
        raise RunError(f"rounds must be >= 1, got {rounds}")
    with run_lock(target_layout, f"coevolve fork --from {source} --run {target}"):
        return _fork(config, source_layout, target_layout, rounds, [] if unshared is None else unshared)


def _fork(config: CoevolveConfig, source_layout: RunLayout, target_layout: RunLayout, rounds: int,
          unshared: list[str]) -> list[Copied]:  # fmt: skip
    source_ctx = open_run(config, source_layout.run, source_layout.root, quiet=True)
    target_ctx = open_run(config, target_layout.run, target_layout.root, quiet=True)
    before = load_saved_config(source_layout)
    write_text_atomic(config.to_yaml(), target_layout.config_path)
    copied = []
    for round_ in range(rounds):
        for stage in round_plan(config, round_):
            shared = _shareable(stage, source_ctx, target_ctx, round_)
            if isinstance(shared, str):
                changed = [p for p in stage.config if _value(before, p) != _value(config, p)]
                why = f"the config changes {', '.join(changed)}" if shared.startswith("stale") and changed else shared
                unshared.append(f"round {round_} {stage.name}: recomputed, {why}")
                continue
            _copy(stage, shared, source_ctx.store, target_ctx.store, round_)
            copied.append((round_, stage.name))
        if len(copied) < sum(len(round_plan(config, r)) for r in range(round_ + 1)):
            if round_ + 1 < rounds:  # a later round reads what this one computes (the dataset, the policy)
                later = f"round {round_ + 1}" if round_ + 2 == rounds else f"rounds {round_ + 1}..{rounds - 1}"
                unshared.append(f"{later}: recomputed, reads what round {round_}'s recomputed stages compute")
            break
    return copied


def _value(config: CoevolveConfig, path: str) -> object:
    try:
        return config.select((path,))[path]
    except KeyError:
        return None


def _shareable(stage: StageDef, source: RunContext, target: RunContext, round_: int) -> Shared | str:
    """(source manifest, target cache key) when the stage can be copied, else why not."""
    manifest = source.store.manifest(round_, stage.name)
    if manifest is None:
        return f"'{source.run}' has not computed it"
    if not set(manifest.artifacts) <= FORKABLE:
        kept = ", ".join(sorted(set(manifest.artifacts) - FORKABLE))
        return f"a fork copies no {kept} (only the rollout ledger, updates, evaluations and the seed dataset)"
    checkpoint = manifest.outputs.get("checkpoint")
    if checkpoint is not None and not source.store.layout.checkpoint_at(checkpoint).is_dir():
        return (f"its checkpoint ({checkpoint}) was pruned from '{source.run}' (train.keep_checkpoints keeps "
                f"only the newest ones)")  # fmt: skip
    try:
        if is_cached(stage, source, round_, stage_key(stage, source, round_)) is None:
            return f"stale in '{source.run}' (an input or its code changed since it ran)"
        return manifest, stage_key(stage, target, round_)
    except ArtifactError:  # an input the source or the target lacks
        return "it reads a stage this fork does not copy"


def _copy(stage: StageDef, shared: Shared, source: RunStore, target: RunStore, round_: int) -> None:
    manifest, key = shared
    ids = _id_map(source, round_, stage.name, manifest, target.run)
    paths = {}
    if "checkpoint" in manifest.outputs:  # recorded relative to the run (older runs: the path as built)
        paths[manifest.outputs["checkpoint"]] = checkpoint_name(round_)
        checkpoint = source.layout.checkpoint_at(manifest.outputs["checkpoint"])
        _link_tree(checkpoint, target.layout.checkpoint_dir(round_))
    copy = Manifest(stage.name, target.run, round_, key, manifest.code_version, started_at=manifest.started_at,
                    seconds=manifest.seconds, forked_from=source.run, files=manifest.files)
    for name in manifest.artifacts:
        table = _retarget(source.read(round_, stage.name, name), target.run, ids, paths)
        copy.artifacts[name] = target.write(round_, stage.name, name, table)
    copy.outputs = {k: paths.get(v, v) if isinstance(v, str) else v for k, v in manifest.outputs.items()}
    target.write_manifest(copy)


def _id_map(source: RunStore, round_: int, stage: str, manifest: Manifest, run: str) -> dict[str, str]:
    """Old -> new trajectory and group ids of the stage's trajectories, derived for run `run` from each row
    (a trajectory id hashes the episode's content, `agents.ledger.trajectory_id`)."""
    if "trajectories" not in manifest.artifacts:
        return {}
    ids = {}
    for row in source.read(round_, stage, "trajectories").to_pylist():
        derivable = (trajectory_id(source.run, round_, row), _id_before_content(source.run, round_, row))
        if row["trajectory_id"] not in derivable:
            raise ArtifactError(f"trajectory {row['trajectory_id']} of stage '{stage}' round {round_} in "
                                f"run '{source.run}' does not have a derivable id: it cannot be forked")
        ids[row["trajectory_id"]] = trajectory_id(run, round_, row)
        ids[row["group_id"]] = group_id(run, round_, row["source"], row["task_id"])
    return ids


def _id_before_content(run: str, round_: int, row: dict) -> str:
    """A trajectory id as runs made before ids hashed the episode's content have them: their stages stay
    cached, and a fork of them gives the copies content ids."""
    return content_hash([run, round_, row["source"], row["task_id"], row["sample"], row["policy_version"]])


def _retarget(table: pa.Table, run: str, ids: dict[str, str], paths: dict[str, str]) -> pa.Table:
    """`table` with the run name, the ids in `ids` and the paths in `paths` replaced."""
    runs = pa.array([run] * table.num_rows, pa.string())
    table = table.set_column(table.column_names.index("run"), "run", runs)
    for column, mapping in {"checkpoint": paths, **dict.fromkeys(_ID_COLUMNS, ids)}.items():
        if column in table.column_names:
            values = [mapping.get(v, v) for v in table.column(column).to_pylist()]
            table = table.set_column(table.column_names.index(column), column, pa.array(values, pa.string()))
    return table


def _link_tree(source: Path, target: Path) -> None:
    """Copy a checkpoint folder as hard links (a plain copy across file systems, written afresh through
    `run_files.atomic_file`). A symlink at the target, or at a folder between the run's folder and it, is
    refused (`PlantedLinkError`) before anything is deleted or written: nothing goes through it."""

    def link(src: str, dst: str) -> None:
        refuse_links(Path(dst))
        try:
            os.link(src, dst)
        except OSError:
            with open(src, "rb") as reading, atomic_file(Path(dst), needed=os.path.getsize(src)) as writing:
                shutil.copyfileobj(reading, writing)
            shutil.copystat(src, dst, follow_symlinks=False)

    refuse_links(target)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, copy_function=link)
