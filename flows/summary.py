"""Per-round metrics from the stage manifests, published as Prefect artifacts for the UI.

Each round that computed something publishes two artifacts in its flow run (Prefect UI -> Artifacts):
`<run>-summary`, markdown for the latest round, and `<run>-rounds`, a table with one row per round so far
(train success and reward, signals by kind, candidates, verification outcomes, dataset size, loss, KL,
held-out success). Everything comes from manifest outputs: no Parquet is read.
"""

from __future__ import annotations

import re
from typing import Any

from coevolve.pipeline.context import RunContext

SIGNAL_KINDS = ("forgetting", "boundary", "rare")
CANDIDATE_STATUSES = ("ok", "unparsable", "invalid", "duplicate")
OUTCOMES = ("accept", "retain", "discard")


def round_metrics(ctx: RunContext, round_: int, dataset_size: int | None = None) -> dict[str, Any]:
    """One flat row of a round's metrics; `dataset_size` is |D| before the round (carried forward)."""
    out = {s: (m.outputs if (m := ctx.store.manifest(round_, s)) else {}) for s in (
        "bootstrap", "rollout", "signals", "abstract", "verify", "merge", "grpo_update", "evaluate")}
    row: dict[str, Any] = {"round": round_}
    row["train_success"] = out["rollout"].get("success_rate")
    row["train_reward"] = out["rollout"].get("mean_reward")
    for kind in SIGNAL_KINDS:
        row[f"{kind}_signals"] = out["signals"].get(f"{kind}_signals")
    for status in CANDIDATE_STATUSES:
        row[f"candidates_{status}"] = out["abstract"].get(status)
    for outcome in OUTCOMES:
        row[outcome] = out["verify"].get(outcome)
    size = out["bootstrap"].get("dataset_size", dataset_size)
    row["added_tasks"] = out["merge"].get("added_tasks")
    row["dataset_size"] = out["merge"].get("dataset_size", size)
    row["loss"] = out["grpo_update"].get("loss")
    row["kl"] = out["grpo_update"].get("kl")
    for key, value in out["evaluate"].items():
        if key.endswith("_success"):
            row[f"eval_{key}"] = value
    return row


def run_metrics(ctx: RunContext, rounds: int) -> list[dict[str, Any]]:
    """`round_metrics` for rounds 0..rounds-1, carrying the dataset size forward."""
    rows, size = [], None
    for r in range(rounds):
        rows.append(round_metrics(ctx, r, size))
        size = rows[-1]["dataset_size"]
    return rows


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


def publish_round(ctx: RunContext, round_: int) -> bool:
    """Publish the round's markdown and the run's table artifact; False outside a flow run."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:
        return False
    rows = run_metrics(ctx, round_ + 1)
    create_markdown_artifact(markdown_summary(ctx.run, rows[-1]), key=artifact_key(ctx.run, "summary"),
                             description=f"CoEvolve run {ctx.run}, round {round_}")
    table = [{k: v for k, v in row.items()} for row in rows]
    create_table_artifact(table, key=artifact_key(ctx.run, "rounds"),
                          description=f"CoEvolve run {ctx.run}: metrics per round")
    return True
