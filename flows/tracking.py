"""Experiment tracking: a run's metrics sent to the trackers named by `tracking.report_to`, as TRL logs them.

    tracking:
      report_to: [tensorboard]      # or trackio, wandb, all; pip install 'coevolve[tensorboard]'

Two step axes, as a TRL user reads them:
- per optimizer step, the step a global optimizer step count across rounds (`train/global_step`): the
  update's `train/loss`, `train/grad_norm`, `train/learning_rate`, `train/clip_ratio`, `train/kl`,
  `train/entropy`, `train/completion_length` (`rl.update_metrics`, from the grpo_update manifest);
- per round, the step the round: `train/success`, `train/reward`, `train/frac_groups_with_signal`,
  `eval/<split>/success` and the evolution's counts `evolution/*` (`flows.summary.round_metrics`).
The run's hparams (model, train, rollout) go once per run (`flows.tracking_writers` says how per tracker). A round is logged once,
the first time it completes (`tracking/logged.json` names the rounds each tracker has): a cached re-run adds
no points, and turning tracking on for an existing run logs its earlier rounds. The writers and where each
tracker keeps its files: `flows.tracking_writers`; the names and why: docs/tracking.md.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from coevolve.config import SIGNAL_KINDS, CoevolveConfig, ConfigError
from coevolve.flows.tracking_writers import WRITERS, Point
from coevolve.storage.layout import RunLayout
from coevolve.storage.parquet import write_text_atomic
from coevolve.storage.store import RunStore

LEDGER = "logged.json"
EXTRAS = {tracker: (tracker, f"coevolve[{tracker}]") for tracker in WRITERS}  # tracker -> (import, extra)
STEP_AXIS = "train/global_step"
ROUND_AXIS = "round"
STEP_TAGS = {  # rl.update_metrics.step_record name -> tag (TRL's names; clip sides as TRL's clip_ratio/*)
    "loss": "train/loss", "grad_norm": "train/grad_norm", "learning_rate": "train/learning_rate",
    "clip_ratio": "train/clip_ratio", "clip_ratio_low": "train/clip_ratio/low_mean",
    "clip_ratio_high": "train/clip_ratio/high_mean", "kl": "train/kl", "entropy": "train/entropy",
    "completion_length": "train/completion_length",
}  # fmt: skip
ROUND_TAGS = {  # round_metrics name -> tag; loss and kl are logged per step instead
    "train_success": "train/success", "train_reward": "train/reward", "tokens_per_second": "train/tokens_per_second",
    "frac_groups_with_signal": "train/frac_groups_with_signal",
    **{f"{kind}_signals": f"evolution/{kind}_signals" for kind in SIGNAL_KINDS},
    **{name: f"evolution/{name}" for name in ("explorations", "candidates_ok", "candidates_unparsable",
       "candidates_invalid", "candidates_duplicate", "accept", "retain", "discard", "added_tasks", "dataset_size")},
}  # fmt: skip


def installed() -> tuple[str, ...]:
    """The trackers whose package is importable (what `report_to: all` means)."""
    return tuple(t for t, (module, _) in EXTRAS.items() if importlib.util.find_spec(module) is not None)


def trackers(config: CoevolveConfig) -> tuple[str, ...]:
    """`tracking.report_to` with `all` replaced by every installed tracker."""
    names = config.tracking.report_to
    return installed() if "all" in names else names


def check_trackers(config: CoevolveConfig) -> None:
    """Raise `ConfigError` naming the extra to install for the first tracker whose package is missing."""
    for tracker in trackers(config):
        module, extra = EXTRAS[tracker]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"tracking.report_to: {tracker} is not installed; pip install '{extra}'")


def tracking_dir(layout: RunLayout) -> Path:
    return layout.run_dir / "tracking"


def track_rounds(config: CoevolveConfig, layout: RunLayout, rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Send each `round_metrics` row, and its update's optimizer steps, that a configured tracker has not
    logged yet; returns the rounds written per tracker."""
    names = trackers(config)
    if not names:
        return {}
    check_trackers(config)
    ledger_path = tracking_dir(layout) / LEDGER
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else {}
    store, written = RunStore(layout), {}
    steps = {r: update_steps(store, r) for r in range(max((row["round"] for row in rows), default=-1) + 1)}
    for tracker in names:
        done = set(ledger.get(tracker, []))
        new = [row for row in rows if row["round"] not in done]
        if new:
            points = [p for row in new for p in round_points(steps, row)]
            WRITERS[tracker](tracking_dir(layout) / tracker, layout.run, points, run_hparams(config))
            ledger[tracker] = sorted(done | {row["round"] for row in new})
            write_text_atomic(json.dumps(ledger, indent=1) + "\n", ledger_path)  # after the points: at least once
        written[tracker] = [row["round"] for row in new]
    return written


def round_points(steps: dict[int, list[dict[str, float]]], row: dict[str, Any]) -> list[Point]:
    """The round's optimizer steps (global step axis; `steps`: each round's `update_steps` up to this one),
    then the round's own metrics (round axis)."""
    round_ = row["round"]
    first = sum(len(steps[r]) for r in range(round_))  # optimizer steps before this round
    points = [Point(STEP_AXIS, first + i + 1, {STEP_TAGS[k]: float(v) for k, v in step.items() if k in STEP_TAGS})
              for i, step in enumerate(steps[round_])]  # fmt: skip
    values = {tag: float(row[key]) for key, tag in round_tags(row).items() if _number(row[key])}
    return [*points, Point(ROUND_AXIS, round_, values)] if values else points


def round_tags(row: dict[str, Any]) -> dict[str, str]:
    """The row's names that are logged, and their tags (`eval_<split>_success` -> `eval/<split>/success`)."""
    evals = {k: f"eval/{k.removeprefix('eval_').removesuffix('_success')}/success" for k in row
             if k.startswith("eval_") and k.endswith("_success")}  # fmt: skip
    return {**{k: t for k, t in ROUND_TAGS.items() if k in row}, **evals}


def update_steps(store: RunStore, round_: int) -> list[dict[str, float]]:
    """The per-optimizer-step records of a round's update (none: no update, or a run from before they were
    recorded)."""
    manifest = store.manifest(round_, "grpo_update")
    return list(manifest.outputs.get("steps", [])) if manifest is not None else []


def run_hparams(config: CoevolveConfig) -> dict[str, Any]:
    """The run's essentials as flat `section.field` hparams: model, environment, train and rollout."""
    out: dict[str, Any] = {"model.name": config.model.name, "env.name": config.env.name}
    for section in ("train", "rollout"):
        for key, value in getattr(config, section).model_dump(mode="json").items():
            if isinstance(value, bool | int | float | str):
                out[f"{section}.{key}"] = value
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
