"""Which completed stages of a run are stale, told from its manifests and saved config alone.

    stale_stages(Path("runs/run=demo"))
    # [("grpo_update", 0, "reads round 0 rollout's samples, rewritten since it ran"),
    #  ("rollout", 1, "reads the policy of round 0 grpo_update, which is stale"), ...]

A stage run records what its cache key hashed from upstream stage runs (`Manifest.read_from`: an artifact's
sha256, the policy version an update produced) and the hash of its declared config fields in the run's
config as written (`config_hash`). It is stale when one of those upstream values is no longer what the
upstream manifest holds (a stage re-run wrote other rows), the upstream stage run is gone, the upstream
stage is itself stale (it will be computed again), or today's saved config gives its fields another hash
(a `--set` saved since). Each of these gives the stage another cache key, so the next `coevolve run`
computes it again, and then it is no longer stale. A manifest without that record (written before it was
kept, or copied by `coevolve fork`) is never called stale until a stage run finds it cached and records it
(`coevolve stage`, or a `coevolve run` with something to compute).

Nothing here imports the pipeline: the web view, the notebook, the catalog (its `stages` table, one row per
stage run with `stale` and `stale_why` columns: `stage_table`) and `coevolve runs` call it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import yaml

from coevolve.core import content_hash
from coevolve.storage.layout import MANIFEST
from coevolve.storage.manifest import InputRef, Manifest
from coevolve.storage.parquet import ArtifactError

ROUND_PREFIX, STAGE_PREFIX = "round=", "stage="


def stale_stages(run_dir: Path) -> list[tuple[str, int, str]]:
    """(stage, round, why) for every stale stage run under `run_dir` (`<root>/run=<run>`), by round and then
    in the order the stages ran; `why` is one clause ("reads round 0 rollout's samples, rewritten since it
    ran"). An empty list when nothing is stale or there is no such run. A manifest of the wrong shape is an
    `ArtifactError` naming it."""
    return _stale(Path(run_dir), _manifests(Path(run_dir)))


STAGES = pa.schema([("run", pa.string()), ("round", pa.int64()), ("stage", pa.string()), ("key", pa.string()),
                    ("seconds", pa.float64()), ("forked_from", pa.string()), ("stale", pa.bool_()),
                    ("stale_why", pa.string())])  # fmt: skip
"""The catalog's `stages` table (`stage_table`)."""


def stage_table(root: Path) -> pa.Table:
    """One row per completed stage run of every run under `root`: its cache key, seconds, the run it was
    forked from, and whether it is stale and why (`stale_stages`), for `SELECT * FROM stages WHERE stale`. A
    run holding a manifest of the wrong shape is left out (`coevolve runs` names it)."""
    rows = []
    for run_dir in sorted(p for p in Path(root).glob("run=*") if p.is_dir()):
        try:
            manifests = _manifests(run_dir)
        except ArtifactError:
            continue
        stale = {(round_, stage): why for stage, round_, why in _stale(run_dir, manifests)}
        rows += [{"run": run_dir.name.removeprefix("run="), "round": round_, "stage": stage, "key": m.key,
                  "seconds": float(m.seconds), "forked_from": m.forked_from, "stale": (round_, stage) in stale,
                  "stale_why": stale.get((round_, stage))}
                 for (round_, stage), m in sorted(manifests.items(), key=lambda item: (item[0][0], item[1].started_at))]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=STAGES)


def _stale(run_dir: Path, manifests: dict[tuple[int, str], Manifest]) -> list[tuple[str, int, str]]:
    config_hash = _saved_config_hasher(run_dir)
    verdicts: dict[tuple[int, str], str | None] = {}

    def why(round_: int, stage: str) -> str | None:
        if (round_, stage) not in verdicts:
            verdicts[round_, stage] = None  # a cycle (never made by the runner) ends here
            verdicts[round_, stage] = _why_stale(manifests[round_, stage], manifests, why, config_hash)
        return verdicts[round_, stage]

    stale = [(stage, round_, reason) for (round_, stage) in manifests if (reason := why(round_, stage))]
    return sorted(stale, key=lambda s: (s[1], manifests[s[1], s[0]].started_at, s[0]))


def _why_stale(manifest: Manifest, manifests: dict[tuple[int, str], Manifest],
               upstream_why: Callable[[int, str], str | None],
               config_hash: Callable[[list[str]], str | None]) -> str | None:  # fmt: skip
    for ref in manifest.read_from:
        upstream = manifests.get((ref.round, ref.stage))
        if upstream is None:
            return f"reads {_what(ref)}, which has not completed since it ran"
        if ref.current(upstream) != ref.value:
            return f"reads {_what(ref)}, {'updated' if ref.field.startswith('outputs.') else 'rewritten'} since it ran"
    if manifest.config_hash and config_hash(manifest.config_fields) not in (None, manifest.config_hash):
        return f"the run's config changed since it ran (its fields: {', '.join(manifest.config_fields)})"
    for ref in manifest.read_from:
        if upstream_why(ref.round, ref.stage):
            return f"reads {_what(ref)}, which is stale"
    return None


def _what(ref: InputRef) -> str:
    kind, _, name = ref.field.partition(".")
    if kind == "outputs" and name == "policy_version":
        return f"the policy of round {ref.round} {ref.stage}"
    return f"round {ref.round} {ref.stage}'s {name}"


def _manifests(run_dir: Path) -> dict[tuple[int, str], Manifest]:
    """Every readable stage manifest of the run, by (round, stage)."""
    found = {}
    for path in run_dir.glob(f"{ROUND_PREFIX}*/{STAGE_PREFIX}*/{MANIFEST}"):
        round_text, stage = path.parent.parent.name.removeprefix(ROUND_PREFIX), path.parent.name.removeprefix(STAGE_PREFIX)
        if round_text.isdigit() and (manifest := Manifest.read(path)) is not None:
            found[int(round_text), stage] = manifest
    return found


def _saved_config_hasher(run_dir: Path) -> Callable[[list[str]], str | None]:
    """fields -> the hash of their values in the run's saved config (as `pipeline.runner.config_hash`), or
    None when the file is missing or does not parse as a config (then config changes are not judged)."""
    from coevolve.config import parse_config

    try:
        config = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), source="config.yaml")
    except Exception:  # noqa: BLE001 - an unreadable config is `coevolve run`'s to report, in one line
        return lambda fields: None

    def hashed(fields: list[str]) -> str | None:
        try:
            return content_hash(config.select(fields), length=24)
        except KeyError:  # a field of another code version
            return None

    return hashed
