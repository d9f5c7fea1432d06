"""Dataset versions D_r: manifests of task ids and sampling weights, never copies of task rows.

D_0 is written by `bootstrap` in round 0; `merge` in round r (data evolution) writes D_{r+1}. Round r
trains on the newest version written before it: `merge` of the latest round < r that merged, else
`bootstrap` of round 0. Task rows live in the `tasks` artifacts of those same stages.

    datasets = Datasets(store)
    version = datasets.version_of(round_=3)        # DatasetVersion: table, sha256, tasks(ids)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pyarrow as pa

from coevolve.storage.parquet import ArtifactError
from coevolve.storage.store import RunStore

DATASET_STAGES = ("merge", "bootstrap")


@dataclass(frozen=True)
class DatasetVersion:
    """The `datasets` rows a round trains on, where they were written, and their task rows on demand."""

    store: RunStore
    round: int
    stage: str
    sha256: str

    @property
    def table(self) -> pa.Table:
        return self.store.read(self.round, self.stage, "datasets")

    def task_ids(self) -> list[str]:
        return self.table.column("task_id").to_pylist()

    def task_rows(self, task_ids: list[str]) -> list[dict]:
        """The `tasks` rows of `task_ids`, from the dataset stages up to this version, in the given order."""
        wanted, found = set(task_ids), {}
        for r in range(self.round, -1, -1):
            for stage in DATASET_STAGES:
                if not wanted - found.keys() or self.store.manifest(r, stage) is None:
                    continue
                for row in self.store.read(r, stage, "tasks").to_pylist():
                    if row["task_id"] in wanted:
                        found.setdefault(row["task_id"], row)
        missing = wanted - found.keys()
        if missing:
            raise ArtifactError(f"dataset version of round {self.round} ({self.stage}) refers to {len(missing)} "
                                f"unknown task ids, e.g. {sorted(missing)[0]}")
        return [found[i] for i in task_ids]


@dataclass(frozen=True)
class Datasets:
    """The dataset versions of one run."""

    store: RunStore

    def source_of(self, round_: int) -> tuple[int, str]:
        """(round, stage) whose `datasets` artifact is the version round `round_` trains on."""
        for r in range(round_ - 1, -1, -1):
            if self.store.manifest(r, "merge") is not None:
                return r, "merge"
        return 0, "bootstrap"

    def version_of(self, round_: int) -> DatasetVersion:
        r, stage = self.source_of(round_)
        manifest = self.store.completed(r, stage)
        return DatasetVersion(self.store, r, stage, manifest.artifact_sha("datasets", stage))


def sample_task_ids(dataset: pa.Table, n: int, rng: random.Random, *, newest_share: float = 0.0) -> list[str]:
    """`n` distinct task ids drawn with probability proportional to weight (Efraimidis-Spirakis keys).

    `newest_share` (`rollout.newest_share`) of the `n` draws, rounded up, are taken first from the tasks the
    latest data evolution that added any added (the dataset's highest `added_round` above 0), by the same
    keys; the rest from all other tasks. Without merged tasks, or at 0, the draw is the plain weighted one.
    """
    ids, weights = dataset.column("task_id").to_pylist(), dataset.column("weight").to_pylist()
    added = dataset.column("added_round").to_pylist()
    keyed = [(math.log(rng.random() or 1e-300) / w, i, a) for i, w, a in zip(ids, weights, added, strict=True)
             if w > 0]  # fmt: skip
    keyed.sort(reverse=True)
    newest = max(added, default=0)
    reserved = math.ceil(newest_share * n) if newest > 0 else 0
    first = [i for _, i, a in keyed if a == newest][:reserved]
    taken = set(first)
    return first + [i for _, i, _ in keyed if i not in taken][: n - len(first)]


def seed_sample(tasks: list, limit: int | None, seed: int) -> list:
    """The seed tasks of D_0: all of `tasks`, or a sample of `limit` of them seeded by the run's seed."""
    return random.Random(seed).sample(tasks, limit) if limit is not None and limit < len(tasks) else list(tasks)
