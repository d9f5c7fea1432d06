"""Experiment tracking: a run's metrics sent to the trackers named by `tracking.report_to`, as TRL logs them.

    tracking:
      report_to: [tensorboard]      # or trackio, wandb, all; pip install 'coevolve[tensorboard]'

One step axis, TRL's global step (`train/global_step`: optimizer steps across rounds, the first is 1):
- per optimizer step, the update's `train/loss`, `train/grad_norm`, `train/learning_rate`,
  `train/clip_ratio`, `train/kl`, `train/entropy`, `train/completion_length`, and with the engine's samples
  corrected `train/sampling/*` (`rl.update_metrics`, from the grpo_update manifest);
- per round, at the round's last optimizer step (as TRL logs an epoch's figures at the step that ends it):
  `train/round`, `train/success`, `train/reward`, `train/frac_groups_with_signal`, the rollout's
  `train/frac_reward_zero_std`, `train/completions/*`, `train/tools/*`, `eval/<split>/success`
  and the evolution's counts `evolution/*` (`flows.summary.round_metrics`): signals of every kind the
  signals contract declares, candidates by status, verdicts, and discards by reason code
  (`evolution/discarded/<code>`; `coevolve.contracts`).
The run's whole config, as written (`model.name` the configured model; a warm start's checkpoint is
`model.warm_start`), goes once per run as hparams with the metrics the HParams tab shows beside them
(`flows.tracking_writers` says how per tracker). A round is logged once,
the first time it completes (`tracking/logged.json` names the rounds each tracker has): a cached re-run adds
no points, and turning tracking on for an existing run logs its earlier rounds. The writers and where each
tracker keeps its files: `flows.tracking_writers`; the names and why: docs/tracking.md.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from coevolve.config import CoevolveConfig, ConfigError
from coevolve.contracts.abstract import STATUSES
from coevolve.contracts.signals import signal_kinds
from coevolve.contracts.verify import VERDICTS, reason_outputs
from coevolve.flows.tracking_writers import WRITERS, Point
from coevolve.storage.layout import RunLayout
from coevolve.storage.parquet import write_text_atomic
from coevolve.storage.store import RunStore

LEDGER = "logged.json"
EXTRAS = {tracker: (tracker, f"coevolve[{tracker}]") for tracker in WRITERS}  # tracker -> (import, extra)
STEP_AXIS = "train/global_step"
ROUND_TAG = "train/round"  # which round a step's per-round figures belong to (TRL's `epoch`)
HPARAM_METRICS = ("train/reward", "train/success", "train/frac_groups_with_signal", "train/loss", "train/kl",
                  "evolution/dataset_size")  # fmt: skip
"""The figures the HParams tab shows beside each run's hparams (and `eval/<split>/success` of its eval splits)."""
STEP_TAGS = {  # rl.update_metrics.step_record name -> tag (TRL's names; clip sides as TRL's clip_ratio/*)
    "loss": "train/loss", "grad_norm": "train/grad_norm", "learning_rate": "train/learning_rate",
    "clip_ratio": "train/clip_ratio", "clip_ratio_low": "train/clip_ratio/low_mean",
    "clip_ratio_high": "train/clip_ratio/high_mean", "kl": "train/kl", "entropy": "train/entropy",
    "completion_length": "train/completion_length",
    **{f"is_ratio_{s}": f"train/sampling/importance_sampling_ratio/{s}" for s in ("min", "mean", "max")},
    **{f"logp_diff_{s}": f"train/sampling/sampling_logp_difference/{s}" for s in ("mean", "max")},
}  # fmt: skip
TRAIN_TAGS = {  # round_metrics name -> tag; loss and kl are logged per step instead
    "train_success": "train/success", "train_reward": "train/reward", "tokens_per_second": "train/tokens_per_second",
    "frac_groups_with_signal": "train/frac_groups_with_signal", "frac_reward_zero_std": "train/frac_reward_zero_std",
    "completions_mean_length": "train/completions/mean_length",
    "completions_clipped_ratio": "train/completions/clipped_ratio",
    "tools_call_frequency": "train/tools/call_frequency", "tools_failure_frequency": "train/tools/failure_frequency",
}  # fmt: skip


def round_tags_known() -> dict[str, str]:
    """Every round_metrics name that is logged -> its tag: the training figures, then the evolution's counts
    as the phases' contracts declare them now (a signal kind or a reason code a package added included)."""
    counts = ("explorations", "candidates", *(f"candidates_{s}" for s in STATUSES), *VERDICTS, "wordings_checked",
              "added_tasks", "dataset_size")  # verdicts per distinct solution (coevolve.contracts.counts)
    return {**TRAIN_TAGS, **{k.output: f"evolution/{k.output}" for k in signal_kinds()},
            **{name: f"evolution/{name}" for name in counts},
            **{name: f"evolution/discarded/{name.removeprefix('discarded_')}" for name in reason_outputs().values()}}  # fmt: skip


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


def track_rounds(
    config: CoevolveConfig, layout: RunLayout, rows: list[dict[str, Any]], *, spec: CoevolveConfig | None = None,
) -> dict[str, list[int]]:
    """Send each `round_metrics` row, and its update's optimizer steps, that a configured tracker has not
    logged yet; returns the rounds written per tracker. `config` is the run's with its warm starts named,
    `spec` the config as written (the run context's `spec`; default `config`): the hparams are the spec's."""
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
            WRITERS[tracker](tracking_dir(layout) / tracker, layout.run, points, run_hparams(config, spec),
                             hparam_metrics(config))
            ledger[tracker] = sorted(done | {row["round"] for row in new})
            write_text_atomic(json.dumps(ledger, indent=1) + "\n", ledger_path)  # after the points: at least once
        written[tracker] = [row["round"] for row in new]
    return written


def save_tracking_choice(spec: CoevolveConfig, layout: RunLayout) -> bool:
    """Write `spec`'s `tracking` section into the run's saved config when it differs there, so a later
    `coevolve run --run NAME` keeps tracking without `--set` again; no stage reads it, so this recomputes
    nothing. True when the file changed."""
    import yaml

    if not layout.config_path.is_file():
        return False
    data = yaml.safe_load(layout.config_path.read_text())  # checked when the run was opened (`flows.runs`)
    if not isinstance(data, dict):
        return False
    choice = spec.tracking.model_dump(mode="json")
    if data.get("tracking") == choice:
        return False
    write_text_atomic(yaml.safe_dump({**data, "tracking": choice}, sort_keys=False), layout.config_path)
    return True


def round_points(steps: dict[int, list[dict[str, float]]], row: dict[str, Any]) -> list[Point]:
    """The round's optimizer steps on the global step axis (`steps`: each round's `update_steps` up to this
    one), the round's own metrics joined to its last step (a round that took no step: at the run's last
    step so far, 0 before any)."""
    round_ = row["round"]
    first = sum(len(steps[r]) for r in range(round_))  # optimizer steps before this round
    points = [Point(STEP_AXIS, first + i + 1, {STEP_TAGS[k]: float(v) for k, v in step.items() if k in STEP_TAGS})
              for i, step in enumerate(steps[round_])]  # fmt: skip
    values = {tag: float(row[key]) for key, tag in round_tags(row).items() if _number(row[key])}
    if not values:
        return points
    values = {ROUND_TAG: float(round_), **values}
    if points:
        return [*points[:-1], Point(STEP_AXIS, points[-1].step, {**points[-1].values, **values})]
    return [Point(STEP_AXIS, first, values)]


def round_tags(row: dict[str, Any]) -> dict[str, str]:
    """The row's names that are logged, and their tags (`eval_<split>_success` -> `eval/<split>/success`)."""
    evals = {k: f"eval/{k.removeprefix('eval_').removesuffix('_success')}/success" for k in row
             if k.startswith("eval_") and k.endswith("_success")}  # fmt: skip
    return {**{k: t for k, t in round_tags_known().items() if k in row}, **evals}


def update_steps(store: RunStore, round_: int) -> list[dict[str, float]]:
    """The per-optimizer-step records of a round's update (none: no update, or a run from before they were
    recorded)."""
    manifest = store.manifest(round_, "grpo_update")
    return list(manifest.outputs.get("steps", [])) if manifest is not None else []


def run_hparams(config: CoevolveConfig, spec: CoevolveConfig | None = None) -> dict[str, Any]:
    """The whole config as written (`spec`, default `config`) as flat `section.field` hparams (a list or an
    unset value as JSON text); where a warm start replaced the model or the teacher (`config`'s names
    differ), its checkpoint as `model.warm_start` / `teacher.warm_start`."""
    spec = spec or config
    out = _flat(spec.model_dump(mode="json"))
    if config.model.name != spec.model.name:
        out["model.warm_start"] = config.model.name
    teacher_model = getattr(config.teacher, "model", None)
    if teacher_model != getattr(spec.teacher, "model", None) and teacher_model is not None:
        out["teacher.warm_start"] = teacher_model
    return out


def hparam_metrics(config: CoevolveConfig) -> tuple[str, ...]:
    """The tags the HParams tab shows per run: `HPARAM_METRICS` and each eval split's success."""
    return (*HPARAM_METRICS, *(f"eval/{split}/success" for split in config.eval.splits))


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, bool | int | float | str) else json.dumps(value)
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
