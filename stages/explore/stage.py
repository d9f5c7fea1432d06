"""explore: signal-guided re-exploration by the teacher (step 3 of the loop).

For each selected signal (at most `explore.max_explorations`, one per task; `explore.allotment` shares them
among the kinds of `signals.kinds`, newest round first) the teacher reflects on the marked trajectory and
explores the task's world
under the context it wrote (`stages.explore.exploration.explore`: R episodes of up to S replies, follow-up
turns asking it to go beyond the request). Writes `explorations` (reflection, context, status, the
explored task) and the episodes as `trajectories`/`steps` with source `explore`. A signal that names a tool
(an `unused` one, a rare one of tool patterns) gives its target that tool (`named_tool.signal_tool`), which
`explore.named_tool_context` and `explore.prefill_named_tool` point the exploration at.

`explore.guided: false` (the paper's "random exploration" ablation) ignores the signals: as many random
worlds of the round's dataset are explored under a generic request and a few random tools.

`evolve.curriculum: oracle` (not CoEvolve: the learning benchmark's ceiling) selects the same signals but
explores nothing: its rows name the families the abstract stage then draws fresh tasks of. `oracle-gap`
(the coverage experiment's ceiling) names a family of the environment's coverage gap in each row instead.

`bootstrap-explore` is the same stage in round 0 before any rollout: unguided exploration of
`dataset.bootstrap_worlds` worlds of `dataset.bootstrap_split` by the teacher of the initial policy, the
first step of D_0's synthesized tasks (`dataset.bootstrap_tasks`).

    coevolve stage explore --run demo --round 9
"""

from __future__ import annotations

import random

from coevolve.agents.teacher import Teacher
from coevolve.core import content_hash, round_seed
from coevolve.envs.base import Task
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import (
    Artifact,
    Dataset,
    EnvTasks,
    EvolutionTeacher,
    Inputs,
    StageDef,
    StageResult,
    rounds_so_far,
)
from coevolve.stages.explore.curriculum import TEACHER as ORACLE
from coevolve.stages.explore.curriculum import gap_explorations, oracle_explorations
from coevolve.stages.explore.exploration import (
    Target,
    exploration_artifacts,
    exploration_id,
    explore,
    select_signals,
    unguided_target,
)
from coevolve.stages.explore.named_tool import signal_tool

OUTCOME_COLUMNS = ["trajectory_id", "sample", "reward", "success"]


def signal_targets(ctx: StageContext, round_: int, inputs: Inputs) -> list[Target]:
    """The signal-marked trajectories to explore, each with its task, steps, outcome and evidence."""
    signals = inputs["signals"].rows()
    rounds = sorted({s["trajectory_round"] for s in signals})
    outcomes = {row["trajectory_id"]: row for row in inputs["trajectories"].rows(OUTCOME_COLUMNS, rounds=rounds)}
    chosen = select_signals([{**s, "sample": outcomes.get(s["trajectory_id"], {}).get("sample", 0)} for s in signals],
                            ctx.config.signals.kinds, ctx.config.explore.max_explorations,
                            ctx.config.explore.allotment)
    task_ids = sorted({s["task_id"] for s in chosen})
    tasks = {t.id: t for t in map(Task.from_row, inputs["dataset"].task_rows(task_ids))}
    marked = {s["trajectory_id"] for s in chosen}
    steps: dict[str, list[dict]] = {}
    for row in inputs["steps"].rows(rounds=sorted({s["trajectory_round"] for s in chosen})):
        if row["trajectory_id"] in marked:
            steps.setdefault(row["trajectory_id"], []).append(row)
    targets = []
    for s in chosen:
        traj = outcomes.get(s["trajectory_id"])
        outcome = f"reward {traj['reward']:.2f}, {'success' if traj['success'] else 'failure'}" if traj else ""
        targets.append(Target(exploration_id(ctx.run, round_, s["signal_id"]), tasks[s["task_id"]], s["kind"],
                              s["signal_id"], s["trajectory_id"], steps.get(s["trajectory_id"], []), outcome,
                              s["evidence"], named_tool=signal_tool(s["kind"], s["evidence"])))  # fmt: skip
    return targets


def unguided_targets(ctx: StageContext, round_: int, worlds: list[Task], n: int, *, kind: str) -> list[Target]:
    """`n` random worlds (initial states) of `worlds`, explored under a generic request and a few random
    tools. Within the run's dataset (`kind` unguided) an exploration keeps the world task's id; the bootstrap
    of D_0 names its own. The teacher never sees the world task's own request or solution."""
    rng = random.Random(round_seed(ctx.config.run.seed, round_, kind))
    chosen = rng.sample(worlds, min(n, len(worlds)))
    return [
        unguided_target(ctx.make_env, w, rng, exploration_id=exploration_id(ctx.run, round_, f"{kind}:{w.id}"),
                        kind=kind, task_id=w.id if kind == "unguided" else content_hash([w.id, kind]))
        for w in chosen
    ]


def explore_targets(ctx: StageContext, round_: int, teacher: Teacher, targets: list[Target],
                    purpose: str) -> StageResult:
    cfg = ctx.config.explore
    with ctx.progress(f"round {round_} {purpose}", len(targets) * cfg.rounds) as advance:
        explorations = explore(teacher, ctx.make_env, targets, rounds=cfg.rounds, steps=cfg.steps,
                               seed=round_seed(ctx.config.run.seed, round_, purpose), follow_ups=cfg.follow_ups,
                               progress=advance, named_tool_context=cfg.named_tool_context,
                               prefill_named_tool=cfg.prefill_named_tool,
                               prefill_arguments=cfg.prefill_arguments,
                               prefill_listing_first=cfg.prefill_listing_first,
                               prefill_listing_call=cfg.prefill_listing_call)
    artifacts = exploration_artifacts(explorations, run=ctx.run, round_=round_, teacher=teacher.version)
    statuses = [x.status for x in explorations]
    outputs = {"explorations": len(explorations), "contexts": statuses.count("ok"),
               "episodes": len(artifacts["trajectories"])}
    return StageResult(artifacts, outputs)


def compute_explore(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    if ctx.config.evolve.curriculum != "teacher":  # not CoEvolve: the ceilings of the learning benchmark
        targets = signal_targets(ctx, round_, inputs)
        if ctx.config.evolve.curriculum == "oracle-gap":
            evolution = (round_ + 1) // ctx.config.evolve.every - 1  # the run's evolutions so far
            explorations = gap_explorations(targets, list(ctx.config.gap_families),
                                            evolution * ctx.config.explore.max_explorations)  # fmt: skip
        else:
            explorations = oracle_explorations(targets)
        artifacts = exploration_artifacts(explorations, run=ctx.run, round_=round_, teacher=ORACLE)
        return StageResult(artifacts, {"explorations": len(explorations), "contexts": 0, "episodes": 0})
    if ctx.config.explore.guided:
        targets = signal_targets(ctx, round_, inputs)
    else:
        dataset = inputs["dataset"]
        worlds = [Task.from_row(row) for row in dataset.task_rows(dataset.task_ids())]
        targets = unguided_targets(ctx, round_, worlds, ctx.config.explore.max_explorations, kind="unguided")
    return explore_targets(ctx, round_, inputs["teacher"], targets, "explore")


def compute_bootstrap_explore(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    worlds = inputs["worlds"][ctx.config.dataset.bootstrap_split]
    targets = unguided_targets(ctx, round_, worlds, ctx.config.dataset.bootstrap_worlds, kind="bootstrap")
    return explore_targets(ctx, round_, inputs["teacher"], targets, "bootstrap-explore")


CONFIG = ("explore", "evolve.curriculum", "teacher", "env", "run.seed")

EXPLORE = StageDef(
    "explore", 3,
    config=(*CONFIG, "signals.kinds", "evolve.every"),
    reads={
        "signals": Artifact("signals", "signals"),
        "trajectories": Artifact("rollout", "trajectories", rounds_so_far),
        "steps": Artifact("rollout", "steps", rounds_so_far),
        "dataset": Dataset(),
        "teacher": EvolutionTeacher(),
    },
    compute=compute_explore,
)

BOOTSTRAP_EXPLORE = StageDef(
    "bootstrap-explore", 1,
    config=(*CONFIG, "dataset.bootstrap_split", "dataset.bootstrap_worlds"),
    reads={"worlds": EnvTasks("dataset.bootstrap_split"), "teacher": EvolutionTeacher(base=True)},
    compute=compute_bootstrap_explore,
)
