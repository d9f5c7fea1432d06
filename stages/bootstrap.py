"""bootstrap: build D_0, the dataset version that round 0 trains on.

D_0 = the seed tasks of `dataset.seed_split` (optionally a seeded sample of `dataset.max_tasks`; none
when the split is null) plus, when `dataset.bootstrap_tasks` = N > 0, up to N tasks synthesized by
unguided exploration (the paper's D_0, N = 100). Those come from the evolution stages themselves, run in
round 0 before any rollout: `bootstrap-explore` (the initial policy's teacher explores
`dataset.bootstrap_worlds` worlds of `dataset.bootstrap_split` under a generic request; their own
requests and solutions are never shown), `bootstrap-triples`, `bootstrap-abstract` and
`bootstrap-verify` (the initial policy attempts), whose admitted tasks this stage takes in order, up to N.
Every task gets weight 1. Writes `tasks` and `datasets` version 0.

    coevolve stage bootstrap --run demo --round 0
"""

from __future__ import annotations

from coevolve.evolution.merging import admitted_tasks
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, EnvTasks, Inputs, StageDef, StageResult, When
from coevolve.storage.datasets import seed_sample


def build_seed_dataset(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    cfg = ctx.config.dataset
    seeds = seed_sample(inputs["seed"].get(cfg.seed_split, []), cfg.max_tasks, ctx.config.d0_sample_seed)
    rows = [{**t.to_row(), "source": "seed"} for t in seeds]
    if inputs["verifications"] is not None:
        admitted = admitted_tasks(inputs["verifications"].rows(), ctx.config.merge.admit, {t.id for t in seeds})
        rows += admitted[: cfg.bootstrap_tasks]
    dataset = [{"dataset_version": 0, "task_id": r["task_id"], "weight": 1.0, "added_round": 0} for r in rows]
    outputs = {"dataset_size": len(rows), "seed_tasks": len(seeds), "synthesized_tasks": len(rows) - len(seeds)}
    return StageResult({"tasks": rows, "datasets": dataset}, outputs)


BOOTSTRAP = StageDef(
    "bootstrap", 2,
    config=("dataset.seed_split", "dataset.max_tasks", "dataset.sample_seed", "dataset.bootstrap_tasks", "merge.admit",
            "run.seed"),
    reads={"seed": EnvTasks("dataset.seed_split"),
           "verifications": When("dataset.bootstrap_tasks", Artifact("bootstrap-verify", "verifications"))},
    compute=build_seed_dataset,
)
