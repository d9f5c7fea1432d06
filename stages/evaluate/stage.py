"""evaluate: score the policy after round r's update on held-out splits the dataset never contains.

Runs every `eval.every` rounds. One episode per task, greedy by default (`eval.samples` sampled ones with
`eval.greedy: false`), on `eval.splits` (at most `eval.max_tasks` per split: a fixed seeded sample, the same
every round). Writes `evals` (per episode reward and success) plus `trajectories`/`steps` with source
`eval:<split>`.

    coevolve stage evaluate --run demo --round 1
"""

from __future__ import annotations

import random

from coevolve.agents.episodes import EpisodeLimits
from coevolve.agents.evaluation import evaluate_splits
from coevolve.config import CoevolveConfig
from coevolve.core import round_seed
from coevolve.envs.base import Task
from coevolve.llm.engine import SamplingParams
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import EnvTasks, Inputs, Policy, StageDef, StageResult

CONFIG = ("eval", "env", "model", "rollout.temperature", "rollout.max_new_tokens", "rollout.max_replies",
          "rollout.max_context_tokens")
"""What an evaluation depends on besides the policy and the tasks (`baseline` declares the same). Not the
run's seed: sampled evaluations draw from a stream fixed per round, so runs that differ only in their seed
evaluate an equal policy identically (the initial policy's baseline is computed once and shared)."""


def eval_sample(tasks: list[Task], split: str, limit: int | None) -> list[Task]:
    """At most `limit` tasks of `split`: a sample seeded by the split's name, so the same every round."""
    if limit is not None and limit < len(tasks):
        return random.Random(f"eval-{split}").sample(tasks, limit)
    return tasks


def eval_settings(config: CoevolveConfig, round_: int) -> tuple[SamplingParams, EpisodeLimits]:
    """How round `round_`'s evaluation samples (greedy by default) and where its episodes stop."""
    cfg, rollout = config.eval, config.rollout
    temperature = 1.0 if cfg.greedy else rollout.temperature
    sampling = SamplingParams(temperature=temperature, max_new_tokens=rollout.max_new_tokens,
                              greedy=cfg.greedy, seed=round_seed(0, round_, "eval"))
    return sampling, EpisodeLimits(rollout.max_replies, rollout.max_context_tokens)


def evaluate_policy(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    cfg = ctx.config.eval
    sampling, limits = eval_settings(ctx.config, round_)
    tasks = {split: eval_sample(split_tasks, split, cfg.max_tasks) for split, split_tasks in inputs["tasks"].items()}
    episodes = sum(map(len, tasks.values())) * cfg.samples
    with ctx.progress(f"round {round_} eval {', '.join(tasks)}", episodes) as advance:
        artifacts, outputs = evaluate_splits(inputs["policy"], ctx.make_env, tasks, sampling, limits, run=ctx.run,
                                             round_=round_, samples=cfg.samples,
                                             max_live=cfg.max_live_episodes, progress=advance)
    return StageResult(artifacts, outputs)


EVALUATE = StageDef(
    "evaluate", 1,
    config=CONFIG,
    reads={"tasks": EnvTasks("eval.splits"), "policy": Policy(after_round=0)},
    compute=evaluate_policy,
)
