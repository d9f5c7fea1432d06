"""Tracker writers for `flows.tracking`: each takes points (an axis, a step, tag -> value) and the run's
hparams and writes them offline, its package imported only when it writes.

- tensorboard: event files in `run=<run>/tracking/tensorboard/`; every tag's step is the global step; the
  hparams once per folder, in the HParams tab (with the run's metrics beside them) and as a `hparams` text
  table.
- trackio: project `coevolve`, run `<run>`, in trackio's own store (`TRACKIO_DIR`, default
  `~/.cache/huggingface/trackio`; trackio fixes it at import, so it cannot be the run's folder); the
  run is resumed on each call, its config the hparams. Read it with `trackio show --project coevolve`.
- wandb: `WANDB_MODE` (default `offline`) runs under `run=<run>/tracking/wandb/`; the axes are W&B step
  metric `train/global_step`. W&B cannot resume an offline run, so each call (each round of a
  flow) is its own W&B run in group `<run>`: `wandb sync` them, then group by `Group`.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = "coevolve"


@dataclass(frozen=True)
class Point:
    """Values logged at one step of an axis (`train/global_step`)."""

    axis: str
    step: int
    values: dict[str, float]


def hparams_table(hparams: dict[str, Any]) -> str:
    return "\n".join(["| hparam | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in hparams.items())])


def write_tensorboard(folder: Path, run: str, points: list[Point], hparams: dict[str, Any],
                      metrics: tuple[str, ...] = ()) -> None:
    """Scalars in a new event file of `folder`; the hparams too when the folder has no event file yet, with
    `metrics` (scalar tags) as the HParams tab's metric columns."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    first = not any(folder.glob("events.out.tfevents.*"))
    with SummaryWriter(log_dir=str(folder)) as writer:
        if first:
            for summary in hparams_summaries(hparams, dict.fromkeys(metrics, 0.0)):
                writer.file_writer.add_summary(summary)
            writer.add_text("hparams", hparams_table(hparams))
        now = time.time()
        for point in points:
            for tag, value in point.values.items():
                writer.add_scalar(tag, value, global_step=point.step, walltime=now)


def write_trackio(folder: Path, run: str, points: list[Point], hparams: dict[str, Any],
                  metrics: tuple[str, ...] = ()) -> None:
    """Points of run `run` in trackio project `coevolve` (trackio's store, not `folder`), the axis value
    beside each point's values."""
    import trackio

    with contextlib.redirect_stdout(io.StringIO()):  # trackio prints a banner per init
        trackio.init(project=PROJECT, name=run, config=hparams, resume="allow", embed=False,
                     auto_log_cpu=False, auto_log_gpu=False)  # fmt: skip
        for point in points:
            trackio.log({**point.values, point.axis: point.step}, step=point.step)
        trackio.finish()


def write_wandb(folder: Path, run: str, points: list[Point], hparams: dict[str, Any],
                metrics: tuple[str, ...] = ()) -> None:
    """One W&B run (offline unless `WANDB_MODE` says otherwise) under `folder`, in group `run`; each tag's
    step metric is its point's axis."""
    import wandb

    folder.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
    wb = wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT), name=run, group=run, dir=str(folder),
                    mode=os.environ.get("WANDB_MODE", "offline"), config=hparams, settings=settings)  # fmt: skip
    try:
        for axis in sorted({p.axis for p in points}):
            wb.define_metric(axis)
        for point in points:
            for tag in point.values:
                wb.define_metric(tag, step_metric=point.axis)
            wb.log({**point.values, point.axis: point.step})
    finally:
        wb.finish()


Writer = Callable[[Path, str, list[Point], dict[str, Any], tuple[str, ...]], None]
"""(folder, run, points, hparams, the metrics to show beside the hparams where the tracker has such a view)."""
WRITERS: dict[str, Writer] = {"tensorboard": write_tensorboard, "trackio": write_trackio, "wandb": write_wandb}
