"""bootstrap: build D_0, the dataset version that round 0 trains on.

D_0 = the seed tasks of `dataset.seed_split` (optionally a seeded sample of `dataset.max_tasks`; none
when the split is null; a sampled task that is a twin of an evaluation task left out, `d0_seed_tasks`) plus, when `dataset.bootstrap_tasks` = N > 0, up to N tasks synthesized by
unguided exploration (the paper's D_0, N = 100). Those come from the evolution stages themselves, run in
round 0 before any rollout: `bootstrap-explore` (the initial policy's teacher explores
`dataset.bootstrap_worlds` worlds of `dataset.bootstrap_split` under a generic request; their own
requests and solutions are never shown), `bootstrap-triples`, `bootstrap-abstract` and
`bootstrap-verify` (the initial policy attempts), whose admitted tasks this stage takes in order, up to N.
Every task gets weight 1. Writes `tasks` and `datasets` version 0.

    coevolve stage bootstrap --run demo --round 0
"""

from __future__ import annotations

from coevolve.envs.base import Task
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, EnvTasks, Inputs, StageDef, StageResult, When
from coevolve.stages.merge.merging import admitted_tasks
from coevolve.stages.verify.contamination import HeldOut
from coevolve.storage.datasets import seed_sample

SEED_GUARD = ("dataset.seed_split", "dataset.max_tasks", "dataset.sample_seed", "run.seed", "eval.splits",
              "verify.contamination_jaccard")
"""The config `d0_seed_tasks` reads (declared by each stage that calls it)."""
SEED_READS = {"seed": EnvTasks("dataset.seed_split"), "evaluated": EnvTasks("eval.splits")}
"""Its inputs: the seed split, and the tasks the run is evaluated on."""


def d0_seed_tasks(ctx: StageContext, inputs: Inputs) -> tuple[list[Task], list[str]]:
    """D_0's seed tasks: the seeded sample of the seed split (`dataset.max_tasks`), less any task that is a
    twin of a task the run is evaluated on by the contamination guard's rules for synthesized tasks (the
    same solution, or a query at `verify.contamination_jaccard` word overlap or above): a generator's
    template can draw the same request into two splits. Sampled first, so a sample without a twin is the
    same as without the guard. Returns the tasks and, per dropped task, why."""
    cfg = ctx.config.dataset
    seeds = inputs["seed"].get(cfg.seed_split, []) if cfg.seed_split else []
    sample = seed_sample(seeds, cfg.max_tasks, ctx.config.d0_sample_seed)
    evaluated = HeldOut.of([t for tasks in inputs["evaluated"].values() for t in tasks])
    twins = {t.id: evaluated.near_duplicate(t, ctx.config.verify.contamination_jaccard) for t in sample}
    return [t for t in sample if not twins[t.id]], [f"{i}: {why}" for i, why in twins.items() if why]


def build_seed_dataset(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    cfg = ctx.config.dataset
    seeds, dropped = d0_seed_tasks(ctx, inputs)
    if dropped and not ctx.quiet:
        print(f"round {round_} bootstrap: {len(dropped)} seed task(s) left out of D_0, twins of evaluation "
              f"tasks ({'; '.join(dropped)})", flush=True)
    rows = [{**t.to_row(), "source": "seed"} for t in seeds]
    if inputs["verifications"] is not None:
        admitted = admitted_tasks(inputs["verifications"].rows(), ctx.config.merge.admit, {t.id for t in seeds})
        rows += admitted[: cfg.bootstrap_tasks]
    dataset = [{"dataset_version": 0, "task_id": r["task_id"], "weight": 1.0, "added_round": 0} for r in rows]
    outputs = {"dataset_size": len(rows), "seed_tasks": len(seeds), "synthesized_tasks": len(rows) - len(seeds),
               "seed_twins_left_out": dropped}
    return StageResult({"tasks": rows, "datasets": dataset}, outputs)


BOOTSTRAP = StageDef(
    "bootstrap", 3,
    config=(*SEED_GUARD, "dataset.bootstrap_tasks", "merge.admit"),
    reads={**SEED_READS,
           "verifications": When("dataset.bootstrap_tasks", Artifact("bootstrap-verify", "verifications"))},
    compute=build_seed_dataset,
)
