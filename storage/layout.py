"""Where a run's files live.

    runs/                                  storage.root (env COEVOLVE_HOME)
      catalog.duckdb                       views over every artifact (rebuildable)
      run=<run>/
        config.yaml                        the resolved config of the run
        round=<r>/stage=<stage>/
          <artifact>.parquet               one file per artifact, replaced atomically
          _manifest.json                   written last: cache key, files, rows, hashes
        checkpoints/round=<r>/             policy after round r's update (HF layout)

The hive-style `run=`, `round=`, `stage=` folders become columns in DuckDB.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "_manifest.json"
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")


def storage_root(explicit: Path | str | None = None, configured: str | None = None) -> Path:
    """Where runs live: an explicit `--root`, else $COEVOLVE_HOME, else the config's `storage.root`, else
    `runs` (relative to the working directory). The one place this is decided."""
    return Path(explicit or os.environ.get("COEVOLVE_HOME") or configured or "runs")


def check_run_name(run: str) -> str:
    if not _RUN_NAME.match(run):
        raise ValueError(
            f"invalid run name {run!r}: use letters, digits, '_', '-', '.' (at most 80, not starting with . or -)"
        )
    return run


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run under a storage root."""

    root: Path
    run: str

    def __post_init__(self) -> None:
        check_run_name(self.run)

    @property
    def run_dir(self) -> Path:
        return self.root / f"run={self.run}"

    @property
    def config_path(self) -> Path:
        return self.run_dir / "config.yaml"

    def stage_dir(self, round_: int, stage: str) -> Path:
        return self.run_dir / f"round={round_}" / f"stage={stage}"

    def artifact_path(self, round_: int, stage: str, artifact: str) -> Path:
        return self.stage_dir(round_, stage) / f"{artifact}.parquet"

    def manifest_path(self, round_: int, stage: str) -> Path:
        return self.stage_dir(round_, stage) / MANIFEST

    def checkpoint_dir(self, round_: int) -> Path:
        return self.run_dir / "checkpoints" / f"round={round_}"

    def rounds(self) -> list[int]:
        """Rounds that have at least one stage folder, ascending."""
        if not self.run_dir.exists():
            return []
        found = (p.name.removeprefix("round=") for p in self.run_dir.glob("round=*") if p.is_dir())
        return sorted(int(r) for r in found if r.isdigit())
