"""Where a run's files live.

    runs/                                  storage.root (env COEVOLVE_HOME)
      catalog.duckdb                       views over every artifact (rebuildable)
      run=<run>/
        config.yaml                        the resolved config of the run
        round=<r>/stage=<stage>/
          <artifact>.parquet               one file per artifact, replaced atomically
          _manifest.json                   written last: cache key, files, rows, hashes
        checkpoints/round=<r>/             policy after round r's update (HF layout)

The hive-style `run=`, `round=`, `stage=` folders become columns in DuckDB. Paths a run records (its
checkpoints) are relative to its `run=<run>/` folder, so a runs folder can be moved or copied.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "_manifest.json"
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}")
_CHECKPOINT_TAIL = re.compile(r"(?:^|/)(checkpoints/round=[0-9]+)/?\Z")


def checkpoint_name(round_: int) -> str:
    """How a run records the checkpoint of round `round_`: relative to the run's folder."""
    return f"checkpoints/round={round_}"


def storage_root(explicit: Path | str | None = None, configured: str | None = None) -> Path:
    """Where runs live: an explicit `--root`, else $COEVOLVE_HOME, else the config's `storage.root`, else
    `runs` (relative to the working directory). The one place this is decided."""
    return Path(explicit or os.environ.get("COEVOLVE_HOME") or configured or "runs")


def root_option(root: Path | str) -> str:
    """What a command printed for the user to paste needs to find runs under `root`: ` --root ROOT`, or
    nothing where `root` is where a command looks by default (`storage_root`)."""
    if Path(root).resolve() == storage_root().resolve():
        return ""
    return f" --root {shlex.quote(str(root))}"


def check_run_name(run: str) -> str:
    if not isinstance(run, str) or not _RUN_NAME.fullmatch(run):  # fullmatch: `$` lets "name\n" through
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
        return self.run_dir / checkpoint_name(round_)

    def checkpoint_at(self, recorded: str) -> Path:
        """The checkpoint folder a manifest (or an `updates` row) of this run records: a name relative to
        the run's folder (`checkpoint_name`), so a runs folder moved or copied anywhere keeps its own
        weights. Older versions recorded the path as built (absolute, or relative to the working
        directory): its tail `checkpoints/round=R` is taken in this run's folder, never another run's;
        a path without that tail is used as it was."""
        found = _CHECKPOINT_TAIL.search(recorded)
        return self.run_dir / found.group(1) if found else Path(recorded)

    def rounds(self) -> list[int]:
        """Rounds that have at least one stage folder, ascending."""
        if not self.run_dir.exists():
            return []
        found = (p.name.removeprefix("round=") for p in self.run_dir.glob("round=*") if p.is_dir())
        return sorted(int(r) for r in found if r.isascii() and r.isdigit())  # not "²"
