"""Read and write the artifacts of one run, stage by stage.

    store = RunStore(RunLayout(Path("runs"), "demo"))
    ref = store.write(round_=0, stage="rollout", artifact="trajectories", rows=[...])
    table = store.read(0, "rollout", "trajectories")

A stage's artifacts are valid only once its manifest exists and lists them with matching hashes; readers
go through the manifest, so a stage killed half-way is invisible and simply runs again, and a file whose
bytes are not the ones recorded (sha256, hashed once per process) is refused as corrupt.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from coevolve.run_files import refuse_links
from coevolve.storage.layout import RunLayout, root_option
from coevolve.storage.manifest import ArtifactRef, Manifest
from coevolve.storage.parquet import ArtifactError, file_matches, read_table, to_table, write_table
from coevolve.storage.schemas import schema_for, schema_version


@dataclass(frozen=True)
class RunStore:
    layout: RunLayout

    @property
    def run(self) -> str:
        return self.layout.run

    def rebuild_hint(self, round_: int, stage: str) -> str:
        return (
            f"Stage '{stage}' of round {round_} writes it: re-run it with "
            f"`coevolve stage {stage} --run {self.run} --round {round_} --force{root_option(self.layout.root)}`."
        )

    def write(self, round_: int, stage: str, artifact: str, rows: list[dict[str, Any]] | pa.Table) -> ArtifactRef:
        """Write one artifact (rows get `run`/`round` filled in) atomically; returns its reference."""
        schema = schema_for(artifact)
        if isinstance(rows, pa.Table):
            table = rows.select(schema.names).cast(schema)
        else:
            table = to_table([{**row, "run": self.run, "round": round_} for row in rows], schema)
        path = self.layout.artifact_path(round_, stage, artifact)
        sha = write_table(table, path)
        stat = path.stat()
        return ArtifactRef(artifact, str(path), table.num_rows, sha, schema_version(schema), stat.st_size,
                           stat.st_mtime_ns)

    def manifest(self, round_: int, stage: str) -> Manifest | None:
        return Manifest.read(self.layout.manifest_path(round_, stage))

    def completed(self, round_: int, stage: str) -> Manifest:
        """The manifest of a completed stage run, or an error saying which command produces it."""
        manifest = self.manifest(round_, stage)
        if manifest is None:
            raise ArtifactError(
                f"stage '{stage}' of round {round_} in run '{self.run}' has not completed "
                f"({self.layout.manifest_path(round_, stage)} missing). {self.rebuild_hint(round_, stage)}"
            )
        return manifest

    def read(self, round_: int, stage: str, artifact: str) -> pa.Table:
        path, _ = self.artifact_file(round_, stage, artifact)
        return read_table(path, schema_for(artifact), rebuild_hint=self.rebuild_hint(round_, stage))

    def artifact_file(self, round_: int, stage: str, artifact: str) -> tuple[Path, str]:
        """The file of a completed stage's artifact and the sha256 its manifest records, refused in one line
        if it holds other bytes (a missing file is left to the reader's error)."""
        manifest = self.completed(round_, stage)
        if artifact not in manifest.artifacts:
            raise ArtifactError(f"stage '{stage}' of round {round_} wrote no '{artifact}' artifact")
        path, ref = self.layout.artifact_path(round_, stage, artifact), manifest.artifacts[artifact]
        if path.exists() and not file_matches(path, ref.sha256, ref.size):
            raise ArtifactError(f"corrupt artifact {path}: its sha256 is not the one stage '{stage}' recorded in "
                                f"its manifest (changed since it was written). {self.rebuild_hint(round_, stage)}")
        return path, ref.sha256

    def invalidate(self, round_: int, stage: str) -> None:
        """Forget a stage run (manifest first, so a crash half-way leaves it invalid, then its files); a link
        planted in the way is refused (`PlantedLinkError`) before anything is deleted."""
        refuse_links(self.layout.manifest_path(round_, stage))
        self.layout.manifest_path(round_, stage).unlink(missing_ok=True)
        shutil.rmtree(self.layout.stage_dir(round_, stage), ignore_errors=True)

    def write_manifest(self, manifest: Manifest) -> None:
        manifest.write(self.layout.manifest_path(manifest.round, manifest.stage))
