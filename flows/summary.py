"""A round in one row of metrics, from its stage manifests: the one summary of a round.

`round_metrics` reads a round's manifests (no Parquet): train success and reward, signals by kind,
explorations, candidates by status and their verdicts per distinct solution (`coevolve.contracts.counts`: one
meaning of each count for every view), verification's discards by reason code, tasks added, dataset size,
loss, KL, the
groups with signal (and their share) and held-out success. Everything that summarises rounds renders these
rows: the line printed per round (`round_line`, which warns when an update had no group with signal), the
Prefect artifacts of a flow run (`publish_round`: `<run>-summary` markdown and `<run>-rounds` table,
Prefect UI -> Artifacts) and `coevolve runs` (`runs_overview`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from coevolve.contracts.counts import STATUSES, CandidateCounts
from coevolve.contracts.signals import SignalsOutputs, signal_kinds
from coevolve.contracts.verify import VerifyOutputs
from coevolve.flows.evaluations import newest_evaluation
from coevolve.rl.rollout_metrics import ROLLOUT_FIGURES
from coevolve.storage.layout import RunLayout
from coevolve.storage.parquet import ArtifactError
from coevolve.storage.store import RunStore

_STAGES = ("bootstrap", "rollout", "signals", "explore", "abstract", "verify", "merge", "grpo_update", "evaluate")


def round_metrics(store: RunStore, round_: int, dataset_size: int | None = None) -> dict[str, Any]:
    """One flat row of a round's metrics; `dataset_size` is |D| before the round (carried forward)."""
    out = {s: (m.outputs if (m := store.manifest(round_, s)) else {}) for s in _STAGES}
    row: dict[str, Any] = {"round": round_}
    row["train_success"] = out["rollout"].get("success_rate")
    row["train_reward"] = out["rollout"].get("mean_reward")
    row["tokens_per_second"] = out["rollout"].get("tokens_per_second")
    for key in ROLLOUT_FIGURES:  # TRL's names (`rl.rollout_metrics`); none in a rollout from before them
        row[key] = out["rollout"].get(key)
    row.update(SignalsOutputs.counts(out["signals"]))
    row["explorations"] = out["explore"].get("explorations")
    counts = CandidateCounts.of(out["abstract"], out["verify"] or None)
    row["candidates"] = counts.candidates if out["abstract"] else None
    for status in STATUSES:
        row[f"candidates_{status}"] = out["abstract"].get(status)
    row["accept"], row["retain"], row["discard"] = counts.accept, counts.retain, counts.discard  # per solution
    row["wordings_checked"] = counts.wordings_checked
    row.update(VerifyOutputs.discards(out["verify"]))  # rows discarded, by reason code
    row["added_tasks"] = out["merge"].get("added_tasks")
    row["dataset_size"] = out["merge"].get("dataset_size", out["bootstrap"].get("dataset_size", dataset_size))
    row["loss"] = out["grpo_update"].get("loss")
    row["kl"] = out["grpo_update"].get("kl")
    row["groups_with_signal"] = out["grpo_update"].get("groups_with_signal")
    groups = out["grpo_update"].get("groups")  # recorded since per-step metrics were
    row["frac_groups_with_signal"] = row["groups_with_signal"] / groups if groups else None
    for key, value in out["evaluate"].items():
        if key.endswith("_success"):
            row[f"eval_{key}"] = value
    return row


def run_metrics(store: RunStore, rounds: int) -> list[dict[str, Any]]:
    """`round_metrics` for rounds 0..rounds-1, carrying the dataset size forward."""
    rows, size = [], None
    for r in range(rounds):
        rows.append(round_metrics(store, r, size))
        size = rows[-1]["dataset_size"]
    return rows


def round_line(row: dict[str, Any], cached: list[str] | None = None, computed: list[str] | None = None) -> str:
    """The line printed for a round: what it trained on, what the evolution did, how the policy scores,
    and which of its stages were `cached`. It says plain "cached" only when told that none was `computed`;
    with some computed it names those, and when that is not known it names the cached ones."""
    parts = [f"round {row['round']}"]
    if row["train_success"] is not None:
        parts.append(f"train {row['train_success']:.0%} reward {row['train_reward']:.2f}")
    kinds = signal_kinds()
    if any(row.get(k.output) is not None for k in kinds if k.paper):
        shown = [k for k in kinds if k.paper or row.get(k.output) is not None]  # extensions a run has
        mix = "/".join(str(row.get(k.output) or 0) for k in shown)
        letters = "/".join(k.letter for k in shown)
        counts = row_counts(row)
        made = f" -> {counts.label()}" if counts is not None else ""
        added = f" -> +{row['added_tasks']} tasks" if row.get("added_tasks") is not None else ""
        parts.append(f"signals {mix} ({letters}){made}{added}")
    if row["dataset_size"] is not None:
        parts.append(f"|D| {row['dataset_size']}")
    if row["loss"] is not None:
        parts.append(f"loss {row['loss']:+.3f}")
    if row.get("groups_with_signal") == 0:  # every group's rewards equal: no advantage, nothing learned
        parts.append("warning: no group with signal (every group's rewards equal), nothing to learn")
    parts += [f"{k.removeprefix('eval_').removesuffix('_success')} {v:.0%}" for k, v in row.items()
              if k.startswith("eval_") and v is not None]  # fmt: skip
    if cached and computed == []:
        parts.append("cached")
    elif cached and computed and len(cached) > len(computed):
        parts.append(f"computed: {', '.join(computed)}; the rest cached")
    elif cached:
        parts.append(f"cached: {', '.join(cached)}")
    return " | ".join(parts)


def row_counts(row: dict[str, Any]) -> CandidateCounts | None:
    """A `round_metrics` row's candidates and verdicts as the record every view labels (None: no abstraction)."""
    if row.get("candidates") is None:
        return None
    n = {s: row.get(f"candidates_{s}") or 0 for s in STATUSES}
    return CandidateCounts(row["candidates"], n["ok"], n["duplicate"], n["invalid"], n["unparsable"],
                           row.get("accept"), row.get("retain"), row.get("wordings_checked"))  # fmt: skip


def runs_overview(root: Path, *, unreadable: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per run under `root`: rounds with a rollout, the last one's dataset size, train success and
    the last held-out success. A run whose manifests cannot be read (a manifest of the wrong shape, values
    of the wrong type, a folder that is not a run's) is one line appended to `unreadable` naming it and why,
    and the other runs are listed; without `unreadable`, it raises."""
    rows = []
    for run_dir in sorted(p for p in root.glob("run=*") if p.is_dir()):
        run = run_dir.name.removeprefix("run=")
        try:
            row = _run_row(RunStore(RunLayout(root, run)))
        except (ArtifactError, ValueError, TypeError, KeyError, OSError) as exc:
            if unreadable is None:
                raise
            unreadable.append(f"run {run!r} in {run_dir} is not listed: {_why_unreadable(exc)}")
            continue
        if row is not None:
            rows.append(row)
    return rows


def _why_unreadable(exc: Exception) -> str:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, ArtifactError | OSError) or reason.startswith("invalid run name"):
        return reason
    return f"a stage manifest under it holds a value of the wrong type ({reason})"  # JSON of the right shape


def _run_row(store: RunStore) -> dict[str, Any] | None:
    """`runs_overview`'s row of one run, or None before its first rollout."""
    rounds = [r for r in store.layout.rounds() if store.manifest(r, "rollout") is not None]
    if not rounds:
        return None
    metrics = run_metrics(store, rounds[-1] + 1)
    evals = [m for m in metrics if any(k.startswith("eval_") for k in m)]
    last_eval = {k.removeprefix("eval_"): v for k, v in evals[-1].items() if k.startswith("eval_")} if evals else {}
    return {"run": store.run, "rounds": len(rounds), "dataset": metrics[-1]["dataset_size"],
            "train": None if metrics[-1]["train_success"] is None else f"{metrics[-1]['train_success']:.0%}",
            "held-out": ", ".join(f"{k.removesuffix('_success')} {v:.0%}" for k, v in last_eval.items()),
            "eval round": evals[-1]["round"] if evals else None,
            "fresh-task eval": newest_evaluation(store.layout.root, store.run)}  # fmt: skip


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def markdown_summary(run: str, row: dict[str, Any]) -> str:
    lines = [f"# Run `{run}`, round {row['round']}", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in row.items() if k != "round" and v is not None]
    return "\n".join(lines)


def artifact_key(run: str, suffix: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{run}-{suffix}".lower()).strip("-")


def publish_round(store: RunStore, round_: int) -> bool:
    """Publish the round's markdown and the run's table artifact; False outside a flow run."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:
        return False
    rows = run_metrics(store, round_ + 1)
    create_markdown_artifact(markdown_summary(store.run, rows[-1]), key=artifact_key(store.run, "summary"),
                             description=f"CoEvolve run {store.run}, round {round_}")
    create_table_artifact(rows, key=artifact_key(store.run, "rounds"),
                          description=f"CoEvolve run {store.run}: metrics per round")
    return True
