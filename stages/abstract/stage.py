"""abstract: the teacher turns each triple group into candidate tasks (step 5 of the loop).

For every group (one exploration context; with `abstract.single_calls` also each of its calls alone) the
teacher answers with a JSON array of tasks; every reply is kept raw next to its parse result, and an
unparsable reply, an invalid task and a near-duplicate (of another candidate or of a task the dataset
holds) are `candidates` rows with their status and reason (`stages.abstract.abstraction`).
With `evolve.curriculum: oracle` or `oracle-gap` (not CoEvolve) the candidates are fresh generator tasks of the families
the explorations name (`stages.explore.curriculum`), `abstract.max_tasks_per_group` per exploration.
`bootstrap-abstract` does the same for round 0's bootstrap exploration, against the seed tasks.

    coevolve stage abstract --run demo --round 9
"""

from __future__ import annotations

from coevolve.contracts.abstract import WRITES, abstract_outputs
from coevolve.core import round_seed
from coevolve.envs.base import Task
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, Dataset, EvolutionTeacher, Inputs, StageDef, StageResult
from coevolve.stages.abstract.abstraction import (
    abstract_groups,
    build_groups,
    mark_duplicates,
    single_call_groups,
)
from coevolve.stages.bootstrap.stage import SEED_GUARD, SEED_READS, d0_seed_tasks
from coevolve.stages.explore.curriculum import oracle_candidates
from coevolve.stages.explore.exploration import explored_tasks


def known_tasks(ctx: StageContext, inputs: Inputs) -> list[Task]:
    """The tasks a candidate must not duplicate: the round's dataset, or D_0's seed tasks in the bootstrap."""
    if "dataset" in inputs:
        dataset = inputs["dataset"]
        return [Task.from_row(row) for row in dataset.task_rows(dataset.task_ids())]
    return d0_seed_tasks(ctx, inputs)[0]


def compute_abstract(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    cfg = ctx.config.abstract
    if ctx.config.evolve.curriculum != "teacher":  # not CoEvolve: fresh generator tasks of the families
        rows = oracle_candidates(ctx.make_env(), inputs["explorations"].rows(), per_target=cfg.max_tasks_per_group,
                                 stream=f"{ctx.run}:{round_}")
        rows = mark_duplicates(rows, known_tasks(ctx, inputs), cfg.duplicate_jaccard)
        return StageResult({"candidates": rows}, abstract_outputs(rows))
    groups = build_groups(inputs["triples"].rows(), explored_tasks(inputs["explorations"].rows()))
    if cfg.single_calls:
        groups += single_call_groups(groups)
    teacher = inputs["teacher"]
    with ctx.progress(f"round {round_} abstract", len(groups) * cfg.samples) as advance:
        rows = abstract_groups(teacher, ctx.make_env, groups, env=ctx.config.env.name, max_tasks=cfg.max_tasks_per_group,
                               duplicate_jaccard=cfg.duplicate_jaccard, existing=known_tasks(ctx, inputs),
                               seed=round_seed(ctx.config.run.seed, round_, "abstract"), samples=cfg.samples,
                               prefill_effect=cfg.prefill_effect, prefill_question=cfg.prefill_question,
                               progress=advance)
    return StageResult({"candidates": rows}, abstract_outputs(rows))


CONFIG = ("abstract", "evolve.curriculum", "teacher", "env", "run.seed")

ABSTRACT = StageDef(
    "abstract", 1,
    config=CONFIG,
    reads={"triples": Artifact("triples", "triples"), "explorations": Artifact("explore", "explorations"),
           "dataset": Dataset(), "teacher": EvolutionTeacher()},
    compute=compute_abstract,
    writes=WRITES,
)

BOOTSTRAP_ABSTRACT = StageDef(
    "bootstrap-abstract", 2,
    config=tuple(dict.fromkeys((*CONFIG, *SEED_GUARD))),
    reads={"triples": Artifact("bootstrap-triples", "triples"),
           "explorations": Artifact("bootstrap-explore", "explorations"),
           **SEED_READS, "teacher": EvolutionTeacher(base=True)},
    compute=compute_abstract,
    writes=WRITES,
)
