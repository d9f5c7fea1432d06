"""`eval.samples`: several sampled episodes per held-out task, the task scored by their mean, through the real
`baseline` stage and the learning benchmark's per-task outcomes. The policy's engine is an oracle that solves
every other episode of a task (`tests.fakes.teacher.OracleEngine`, solve="alternate")."""

from __future__ import annotations

import pytest

from coevolve.benchmarks.learning.outcomes import per_task_evals
from coevolve.config import ConfigError, load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.context import RunContext
from coevolve.pipeline.runner import run_stage
from coevolve.stages.baseline.stage import BASELINE
from coevolve.storage.catalog import query
from tests.conftest import CONFIGS
from tests.fakes.teacher import OracleEngine

RUN = "learning-grpo-s0"  # a name the learning benchmark's tables read


def alternating_context(root, *overrides: str) -> RunContext:
    cfg = load_config(CONFIGS / "test-tiny.yaml", ["eval.max_tasks=3", *overrides])
    test = open_run(cfg, RUN, root).env_tasks("test")
    return open_run(cfg, RUN, root, quiet=True,
                    engine_factory=lambda policy: OracleEngine(policy.tokenizer, test, solve="alternate"))


def test_each_task_is_scored_by_the_mean_of_its_sampled_episodes(tmp_path):
    record = run_stage(BASELINE, alternating_context(tmp_path, "eval.greedy=false", "eval.samples=4"), 0)

    episodes = query(tmp_path, "SELECT e.task_id, t.sample, e.success, e.greedy FROM evals e "
                               "JOIN trajectories t USING (trajectory_id)").to_pylist()
    assert len(episodes) == 3 * 4 and not any(row["greedy"] for row in episodes)
    assert {(row["task_id"], row["sample"]) for row in episodes} == {
        (task, sample) for task in {row["task_id"] for row in episodes} for sample in range(4)}
    assert record.manifest.outputs["test_success"] == 0.5  # two of each task's four episodes solve it

    outcomes = per_task_evals(tmp_path, [RUN])
    assert outcomes.height == 3 and outcomes["success"].to_list() == [0.5, 0.5, 0.5]


def test_one_episode_per_task_keeps_outcomes_of_zero_or_one(tmp_path):
    run_stage(BASELINE, alternating_context(tmp_path), 0)

    outcomes = per_task_evals(tmp_path, [RUN])
    assert outcomes.height == 3 and set(outcomes["success"].to_list()) == {1.0}  # each task's first episode


def test_several_greedy_episodes_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"eval\.samples: 3 greedy episodes .* eval\.greedy: false"):
        load_config(CONFIGS / "test-tiny.yaml", ["eval.samples=3"])


class CountingEngine(OracleEngine):
    """The oracle, recording how many episodes each generation step carried (a fake: counts only)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.in_flight: list[int] = []

    def generate(self, prompts, sampling, *, progress=None, sessions=None):
        self.in_flight.append(len(prompts))
        return super().generate(prompts, sampling, progress=progress, sessions=sessions)


def test_a_cap_on_live_episodes_bounds_each_step_and_changes_no_episode(tmp_path, tokenizer):
    from coevolve import envs
    from coevolve.agents.episodes import EpisodeLimits, run_episodes
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.engine import SamplingParams

    tasks = envs.make("toolworld", seed=0).tasks("train")[:5]
    jobs = [(task, sample) for task in tasks for sample in range(2)]

    def run(max_live):
        engine = CountingEngine(tokenizer, tasks, solve="alternate")
        episodes = run_episodes(engine, ChatFormat(tokenizer), lambda: envs.make("toolworld", seed=0), jobs,
                                SamplingParams(greedy=True), EpisodeLimits(), max_live=max_live)
        return engine.in_flight, [(ep.task.id, ep.sample, ep.input_ids, ep.evaluation.success) for ep in episodes]

    unbounded_steps, unbounded = run(None)
    capped_steps, capped = run(3)
    assert max(unbounded_steps) == 10 and max(capped_steps) == 3
    assert capped == unbounded  # in job order, token for token
    assert {success for *_, success in capped} == {True, False}
