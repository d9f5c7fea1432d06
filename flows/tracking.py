"""Experiment tracking: every round's metrics sent to the trackers named by `tracking.report_to`.

    tracking:
      report_to: [tensorboard]      # pip install 'coevolve[tensorboard]'; then `tensorboard --logdir runs`

The metrics are the row of `flows.summary.round_metrics` (the printed line, the Prefect table and this
share its names), one point per round with the round as the step. Trackers write offline under the run's
folder, `run=<run>/tracking/<tracker>/`, so `tensorboard --logdir runs` overlays every run. A round is
logged once, the first time it completes (`tracking/logged.json` names the rounds each tracker has): a
cached re-run adds no points, and turning tracking on for an existing run logs its earlier rounds. The
trackers weighed and why TensorBoard: docs/tracking.md.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.config import CoevolveConfig, ConfigError
from coevolve.storage.layout import RunLayout
from coevolve.storage.parquet import write_text_atomic

LEDGER = "logged.json"
EXTRAS = {"tensorboard": ("tensorboard", "coevolve[tensorboard]")}  # tracker -> (import name, extra)


def check_trackers(config: CoevolveConfig) -> None:
    """Raise `ConfigError` naming the extra to install for the first tracker whose package is missing."""
    for tracker in config.tracking.report_to:
        module, extra = EXTRAS[tracker]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"tracking.report_to: {tracker} is not installed; pip install '{extra}'")


def tracking_dir(layout: RunLayout) -> Path:
    return layout.run_dir / "tracking"


def track_rounds(config: CoevolveConfig, layout: RunLayout, rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Send each `round_metrics` row that a configured tracker has not logged yet; returns the rounds
    written per tracker."""
    if not config.tracking.report_to:
        return {}
    check_trackers(config)
    ledger_path = tracking_dir(layout) / LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    written = {}
    for tracker in config.tracking.report_to:
        done = set(ledger.get(tracker, []))
        new = [row for row in rows if row["round"] not in done]
        if new:
            WRITERS[tracker](tracking_dir(layout) / tracker, new)
            ledger[tracker] = sorted(done | {row["round"] for row in new})
            write_text_atomic(json.dumps(ledger, indent=1) + "\n", ledger_path)  # after the points: at least once
        written[tracker] = [row["round"] for row in new]
    return written


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's numeric metrics (not the round itself, no missing values)."""
    return {key: float(value) for key, value in row.items()
            if key != "round" and isinstance(value, int | float) and not isinstance(value, bool)}  # fmt: skip


def write_tensorboard(folder: Path, rows: list[dict[str, Any]]) -> None:
    """One scalar per metric and round (step = round) in a new event file of `folder`."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(folder)) as writer:
        now = time.time()
        for row in rows:
            for key, value in scalars(row).items():
                writer.add_scalar(key, value, global_step=row["round"], walltime=now)


WRITERS: dict[str, Callable[[Path, list[dict[str, Any]]], None]] = {"tensorboard": write_tensorboard}
