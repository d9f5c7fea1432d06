"""Read-only access to a storage root for the web view: DuckDB views, stage manifests, run configs.

One in-memory DuckDB connection (`storage.catalog.connect`: it never opens `catalog.duckdb`, so a run
can write while the view reads; it reads files under the root only and its settings are locked) serves
every request through its own cursor. The views read globs, so new files of a known artifact are seen at
once. Artifacts that appear later (a run's first signals) get their view when the connection is rebuilt:
every `refresh_s` seconds, in a background thread (it reads every Parquet footer once), while requests
keep using the previous one. Which stages are stale is read from the manifests on each request
(`RunsReader.stale`). Nothing here writes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import yaml

from coevolve.storage.catalog import connect
from coevolve.storage.layout import MANIFEST, RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.staleness import stale_stages

STAGE_ORDER = ("warm-start", "bootstrap", "baseline", "rollout", "signals", "explore", "triples", "abstract",
               "verify", "merge", "grpo_update", "evaluate")  # fmt: skip
"""The order stages run in within a round (docs/architecture.md); others follow by name."""


class RunsReader:
    """Queries over every run under `root`; `rows` takes SQL with `?` parameters, never formatted values."""

    def __init__(self, root: Path, refresh_s: float = 30.0) -> None:
        self.root = root
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._views: frozenset[str] = frozenset()
        self._built = 0.0
        self._refreshing = False

    def _build(self) -> None:
        try:
            con = connect(self.root)  # files under the root only, settings locked
            views = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        except BaseException:
            with self._lock:
                self._refreshing = False  # the next request tries again
            raise
        with self._lock:  # the old connection closes once no cursor holds it
            self._con, self._views = con, frozenset(v[0] for v in views)
            self._built, self._refreshing = time.monotonic(), False

    def _connection(self) -> tuple[duckdb.DuckDBPyConnection, frozenset[str]]:
        with self._lock:
            current, views = self._con, self._views
            stale = current is not None and not self._refreshing and time.monotonic() - self._built > self.refresh_s
            if stale:
                self._refreshing = True
        if current is None:
            self._build()
            return self._connection()
        if stale:
            threading.Thread(target=self._build, name="coevolve-ui-catalog", daemon=True).start()
        return current, views

    def has(self, *views: str) -> bool:
        """Every one of `views` exists (an artifact no stage has written yet has no view)."""
        return set(views) <= self._connection()[1]

    def rows(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cursor = self._connection()[0].cursor()
        try:
            result = cursor.execute(sql, list(params))
            columns = [d[0] for d in result.description]
            return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]
        finally:
            cursor.close()

    def one(self, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> dict[str, Any] | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    def runs(self) -> list[str]:
        """Run names: the `run=` folders under the root."""
        if not self.root.is_dir():
            return []
        return sorted(p.name.removeprefix("run=") for p in self.root.glob("run=*") if p.is_dir())

    def layout(self, run: str) -> RunLayout:
        """The run's layout; raises LookupError for a run that is not under the root (or not a valid name)."""
        try:
            layout = RunLayout(self.root, run)
        except ValueError as exc:
            raise LookupError(str(exc)) from None
        if not layout.run_dir.is_dir():
            raise LookupError(f"no run {run!r} under {self.root}")
        return layout

    def config(self, run: str) -> dict[str, Any]:
        """The run's resolved config (`config.yaml`), or {} when absent or unreadable."""
        try:
            return yaml.safe_load(self.layout(run).config_path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            return {}

    def stages(self, run: str, round_: int) -> list[dict[str, Any]]:
        """The round's stage folders in run order: manifest (None: files without one, a stage killed or
        still running) and the artifact files present."""
        round_dir = self.layout(run).run_dir / f"round={round_}"
        found = [p for p in round_dir.glob("stage=*") if p.is_dir()] if round_dir.is_dir() else []
        names = sorted((p.name.removeprefix("stage=") for p in found), key=_stage_position)
        out = []
        for name in names:
            folder = round_dir / f"stage={name}"
            files = sorted(p.stem for p in folder.glob("*.parquet"))
            out.append({"stage": name, "manifest": Manifest.read(folder / MANIFEST), "files": files})
        return out

    def stale(self, run: str) -> list[dict[str, Any]]:
        """The run's stale stage runs, by round (`storage.staleness.stale_stages`: a stage that read an upstream
        artifact or policy rewritten since, or whose config fields the saved config now sets otherwise), each
        `{"round", "stage", "why"}`. Read from the manifests at each call, not from the connection's `stages`
        table (built with the connection, up to `refresh_s` old), so a stage re-run shows on the next request.
        A manifest of the wrong shape is an `ArtifactError` naming it."""
        return [{"round": round_, "stage": stage, "why": why}
                for stage, round_, why in stale_stages(self.layout(run).run_dir)]  # fmt: skip

    def manifest(self, run: str, round_: int, stage: str) -> Manifest | None:
        return Manifest.read(self.layout(run).manifest_path(round_, stage))

    def tokenizer_file(self, run: str) -> Path | None:
        """A `tokenizer.json` the run saved with a checkpoint (training never changes the tokenizer)."""
        found = self.layout(run).run_dir.glob("checkpoints/round=*/tokenizer.json")
        return max(found, key=lambda p: _round_of(p.parent.name), default=None)


def _round_of(folder: str) -> int:
    number = folder.removeprefix("round=")
    return int(number) if number.isdigit() else -1


def _stage_position(name: str) -> tuple[int, str]:
    return (STAGE_ORDER.index(name) if name in STAGE_ORDER else len(STAGE_ORDER), name)
