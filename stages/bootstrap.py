"""bootstrap: build D_0, the dataset version that round 0 trains on.

D_0 = the seed tasks of `dataset.seed_split` (optionally a seeded sample of `dataset.max_tasks`; none
when the split is null) plus, when `dataset.bootstrap_tasks` = N > 0, up to N tasks synthesized by
unguided exploration (the paper's D_0, N = 100): the teacher explores worlds taken from the initial
states of `dataset.bootstrap_split` (their user requests and solutions are not shown: the episode's
request is a generic one and the context names a few random tools), then the same triples -> abstract ->
verify path as the evolution rounds runs, with the base policy verifying. Iterations of
`evolve.max_explorations` worlds repeat until N tasks are admitted or `dataset.bootstrap_budget`
iterations have run. Every task gets weight 1.

Writes `tasks` and `datasets` version 0; with exploration also `explorations`, `trajectories`/`steps`
(sources explore and verify), `triples`, `candidates` and `verifications`, like the evolution stages.
"""

from __future__ import annotations

import random
from collections import defaultdict

from coevolve.agents import teacher as teachers
from coevolve.envs.base import Task
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import StageDef, StageResult
from coevolve.stages.abstract import abstract_groups, build_groups
from coevolve.stages.explore import exploration_artifacts, explore, unguided_target
from coevolve.stages.merge import admitted_tasks
from coevolve.stages.triples import build_triples
from coevolve.stages.verify import exploration_lineage, held_out_tasks, settings_of, verify_candidates
from coevolve.storage.datasets import task_from_row, task_row

from coevolve.core import content_hash, round_seed


def _seed_tasks(ctx: RunContext) -> list[Task]:
    cfg = ctx.config.dataset
    if cfg.seed_split is None:
        return []
    tasks = ctx.env_tasks(cfg.seed_split)
    if cfg.max_tasks is not None and cfg.max_tasks < len(tasks):
        tasks = random.Random(ctx.config.run.seed).sample(tasks, cfg.max_tasks)
    return tasks


def _inputs(ctx: RunContext, round_: int) -> dict[str, str]:
    inputs = {"seed_tasks": content_hash([t.id for t in _seed_tasks(ctx)])}
    if ctx.config.dataset.bootstrap_tasks:
        inputs["exploration"] = content_hash(
            ctx.config.section("evolve", "teacher", "model", "rollout", "eval")
        )
        inputs["policy"] = ctx.policy_after(-1)[0]
    return inputs


def explore_tasks(ctx: RunContext, known: list[Task]) -> tuple[list[dict], dict[str, list[dict]]]:
    """(admitted task rows, artifacts) of the unguided exploration loop."""
    cfg, evolve = ctx.config.dataset, ctx.config.evolve
    worlds = ctx.env_tasks(cfg.bootstrap_split)
    rng = random.Random(round_seed(ctx.config.run.seed, 0, "bootstrap"))
    worlds = rng.sample(worlds, len(worlds))
    teacher, policy = teachers.make_teacher(ctx, 0, policy_round=-1), ctx.use_policy(-1)
    held_out, per_iteration = held_out_tasks(ctx), max(evolve.max_explorations, 1)
    artifacts: dict[str, list[dict]] = defaultdict(list)
    admitted: list[dict] = []
    for it in range(cfg.bootstrap_budget):
        batch = worlds[it * per_iteration : (it + 1) * per_iteration]
        if len(admitted) >= cfg.bootstrap_tasks or not batch:
            break
        seed = round_seed(ctx.config.run.seed, 0, f"bootstrap-{it}")
        label = f"bootstrap:{it}"
        targets = [
            unguided_target(ctx, w, 0, label, rng, kind="bootstrap", task_id=content_hash([w.id, label]))
            for w in batch
        ]
        explored = exploration_artifacts(
            explore(
                teacher,
                ctx.make_env,
                targets,
                rounds=evolve.explore_rounds,
                steps=evolve.explore_steps,
                seed=seed,
                follow_ups=evolve.explore_follow_ups,
            ),
            run=ctx.run,
            round_=0,
            teacher=teacher.version,
        )
        tasks = {t.task.id: t.task for t in targets}
        triples = build_triples(ctx.make_env, explored["explorations"], explored["steps"], tasks)
        groups = build_groups(triples, {t.exploration_id: t.task for t in targets})
        existing = known + [task_from_row(r) for r in admitted]
        candidates = abstract_groups(
            teacher,
            ctx.make_env,
            groups,
            env=ctx.config.env.name,
            max_tasks=evolve.max_tasks_per_group,
            duplicate_jaccard=evolve.duplicate_jaccard,
            existing=existing,
            seed=seed,
            samples=evolve.abstract_samples,
            prefill_effect=evolve.abstract_prefill_effect,
        )
        verified = verify_candidates(
            policy,
            ctx.make_env,
            candidates,
            held_out,
            exploration_lineage(explored["explorations"]),
            settings_of(ctx, 0, f"bootstrap-verify-{it}"),
            run=ctx.run,
            round_=0,
        )
        new = admitted_tasks(verified["verifications"], evolve.admit, {t.id for t in existing})
        admitted += new[: cfg.bootstrap_tasks - len(admitted)]
        for name, rows in [
            *explored.items(),
            ("triples", triples),
            ("candidates", candidates),
            *verified.items(),
        ]:
            artifacts[name] += rows
    return admitted, dict(artifacts)


def build_seed_dataset(ctx: RunContext, round_: int, key: str) -> StageResult:
    seeds = _seed_tasks(ctx)
    rows = [{**task_row(t), "source": "seed"} for t in seeds]
    artifacts: dict[str, list[dict]] = {}
    if ctx.config.dataset.bootstrap_tasks:
        synthesized, artifacts = explore_tasks(ctx, seeds)
        rows += synthesized
    dataset = [{"dataset_version": 0, "task_id": r["task_id"], "weight": 1.0, "added_round": 0} for r in rows]
    outputs = {
        "dataset_size": len(rows),
        "seed_tasks": len(seeds),
        "synthesized_tasks": len(rows) - len(seeds),
    }
    return StageResult({"tasks": rows, "datasets": dataset, **artifacts}, outputs)


BOOTSTRAP = StageDef("bootstrap", 1, ("env", "dataset", "run"), _inputs, build_seed_dataset)
