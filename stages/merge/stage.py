"""merge: D_{r+1} = D_r + the verified tasks (step 7 of the loop). The dataset only grows.

Reads D_r (the dataset version round r trained on) and this round's `verifications`; admits the tasks
whose outcome is in `merge.admit` (default accept and retain, as the paper keeps both) and that D_r does
not hold yet (`stages.merge.merging`). Writes their `tasks` rows (source and split `synthesized`, lineage
JSON with signal, trajectory, exploration, group, candidate and verification ids) and `datasets` version
r+1: every task of D_r with its weight, plus the new ones weighted by `merge.signal_weight` (and, with
`merge.unsolved_weighting`, by the share of the policy's verification attempts that failed them).
Rounds after r train on this version.

    coevolve stage merge --run demo --round 9
"""

from __future__ import annotations

from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, Dataset, Inputs, StageDef, StageResult
from coevolve.stages.merge.merging import admitted_tasks, merge_dataset, solved_shares


def compute_merge(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    cfg = ctx.config.merge
    previous = [
        {k: row[k] for k in ("task_id", "weight", "added_round")} for row in inputs["dataset"].table.to_pylist()
    ]
    new_tasks = admitted_tasks(inputs["verifications"].rows(), cfg.admit, {row["task_id"] for row in previous})
    solved = solved_shares(inputs["attempts"].rows()) if cfg.unsolved_weighting else None
    dataset = merge_dataset(previous, new_tasks, version=round_ + 1, signal_weight=cfg.signal_weight, solved=solved)
    never_drawn = sum(row["weight"] == 0 for row in dataset[len(previous):])
    return StageResult(
        {"tasks": new_tasks, "datasets": dataset},
        {"dataset_size": len(dataset), "added_tasks": len(new_tasks), "dataset_version": round_ + 1,
         "added_never_drawn": never_drawn},
    )


MERGE = StageDef(
    "merge", 1,
    config=("merge",),
    reads={"dataset": Dataset(), "verifications": Artifact("verify", "verifications"),
           "attempts": Artifact("verify", "trajectories")},
    compute=compute_merge,
)
