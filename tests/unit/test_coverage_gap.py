"""The coverage regime's gap: families no training data shows, refused where they would leak, drawn by the
oracle-gap ceiling in turn, one D_0 for every seed (docs/experiments/learning-protocol.md)."""

from __future__ import annotations

import pytest

from coevolve import envs
from coevolve.benchmarks.learning.coverage import gap_tools
from coevolve.config import ConfigError, load_config
from coevolve.envs.toolworld.tasks import TRAIN_TEMPLATES, training_tools
from coevolve.stages.explore.curriculum import gap_explorations
from coevolve.stages.explore.exploration import Target
from coevolve.storage.datasets import seed_sample
from tests.conftest import CONFIGS

COVERAGE = CONFIGS / "coverage-smollm2.yaml"


def test_no_training_data_shows_a_gap_family_or_calls_a_gap_tool():
    """D_0 (`train`), the warm starts (fresh `train` tasks) and the prompts' examples never show a gap family
    or a gap tool: the gap is what a static training set lacks."""
    config = load_config(COVERAGE)
    gap = gap_tools(config.gap_families)
    assert len(config.gap_families) >= 8 and gap and not gap & training_tools()
    env = envs.make("toolworld", **config.env.options)
    source = envs.make("toolworld", **{**config.env.options, "seed": 1})  # where a warm start draws from
    for tasks in (env.tasks("train"), source.tasks("train")):
        assert not {t.family for t in tasks} & set(config.gap_families)
        assert not {c.name for t in tasks for turn in t.solution for c in turn} & gap
    shown = " ".join(m["content"] for m in env.demonstrations())
    from coevolve.stages.abstract import prompting as abstract_prompts
    from coevolve.stages.explore import prompting as explore_prompts

    texts = [shown, *(p.prompt_template(name, p.__package__, p.PROMPTS).template
                      for p in (abstract_prompts, explore_prompts) for name in p.PROMPTS)]  # fmt: skip
    assert not [tool for tool in gap for text in texts if tool in text]
    assert {t.family for t in env.tasks("gap-validation")} == set(config.gap_families)
    assert not {t.id for t in env.tasks("gap-validation")} & {t.id for t in env.tasks("gap-test")}


@pytest.mark.parametrize(("families", "named"), [
    (["deposit_funds", "bank_balance"], "'bank_balance' is a training or heldout-templates family"),
    (["deposit_funds", "move_file"], "'move_file' is a training or heldout-templates family"),
    (["deposit_funds", "teleport"], "no gap family 'teleport'"),
])  # fmt: skip
def test_a_gap_that_training_data_shows_is_refused_in_one_line(families, named):
    with pytest.raises(ValueError, match=f"^env.options.gap_families: {named}"):
        envs.make("toolworld", gap_families=families)


def test_d0_from_a_gap_split_and_an_oracle_gap_without_a_gap_are_refused():
    with pytest.raises(ConfigError, match="dataset.seed_split: gap-validation holds the coverage gap"):
        load_config(COVERAGE, ["dataset.seed_split=gap-validation"])
    with pytest.raises(ConfigError, match="oracle-gap draws the coverage gap's families"):
        load_config(CONFIGS / "test-tiny.yaml", ["evolve.curriculum=oracle-gap"])


def test_one_d0_for_every_seed_covering_every_app():
    config = load_config(COVERAGE)
    train = envs.make("toolworld", **config.env.options).tasks("train")
    draws = [seed_sample(train, config.dataset.max_tasks, load_config(COVERAGE, [f"run.seed={s}"]).d0_sample_seed)
             for s in (0, 1, 7)]  # fmt: skip
    assert draws[0] == draws[1] == draws[2]
    assert set().union(*(set(t.initial_state) for t in draws[0])) == {"bank", "files", "messages", "shop", "calendar"}
    assert {t.family for t in draws[0]} < {t.name for t in TRAIN_TEMPLATES}


def test_oracle_gap_draws_every_gap_family_once_before_any_twice():
    task = envs.make("toolworld").tasks("train")[0]
    targets = [Target(f"x{i}", task, "boundary", f"s{i}", f"t{i}") for i in range(4)]
    gap = [f"family-{i}" for i in range(8)]
    named = [x.context["families"] for evolution in (0, 1, 2) for x in gap_explorations(targets, gap, 4 * evolution)]
    assert [f for families in named for f in families] == gap + gap[:4]


def test_the_gap_rule_keeps_families_the_warm_start_neither_solves_nor_ignores():
    """`bench learning --gap-families`: a family the warm start solves more than 10 % of the time is no gap,
    nor one whose sampled rewards never differ within a task (no GRPO gradient); the rest are the gap."""
    import polars as pl

    from coevolve.benchmarks.learning.gap import SAMPLES, judge_families

    def episodes(family: str, task: str, rewards: list[float], successes: int = 0) -> list[dict]:
        return [{"family": family, "task_id": task, "reward": r, "success": i < successes}
                for i, r in enumerate(rewards)]  # fmt: skip

    assert SAMPLES == 4
    rows = (episodes("learnable", "a", [0.1, 0.3, 0.1, 0.1]) + episodes("learnable", "b", [0.2, 0.2, 0.4, 0.2])
            + episodes("solved", "c", [1, 1, 0.2, 0.2], successes=2) + episodes("solved", "d", [0.2, 0.3, 0.2, 0.2])
            + episodes("flat", "e", [0.1] * 4) + episodes("flat", "f", [0.1, 0.1, 0.1, 0.2]))  # fmt: skip
    table = judge_families(pl.DataFrame(rows))
    assert dict(zip(table["family"], table["verdict"], strict=True)) == {
        "learnable": "gap", "solved": "solved", "flat": "gap"}  # fmt: skip
    flat = judge_families(pl.DataFrame(episodes("flat", "e", [0.1] * 4) + episodes("flat", "f", [0.1] * 4)))
    assert flat["verdict"].to_list() == ["no signal"] and flat["spread_share"].to_list() == [0.0]


@pytest.mark.parametrize("seed", [0, 1])
def test_every_gap_family_a_plan_may_name_needs_its_gap_tool(seed):
    """No covered tool call the task's world admits and no argument-free listing solves a candidate gap family's
    task (scored by its own checker); the first coverage plan's answer-only families did fall to one."""
    from coevolve.envs.toolworld.families_gap import CANDIDATES, RETIRED
    from coevolve.envs.toolworld.gap_check import check_families

    candidates = check_families([t.name for t in CANDIDATES], tasks_per_family=6, seed=seed)
    assert len(candidates) >= 8 and not {family: wins for family, wins in candidates.items() if wins}
    retired = check_families([t.name for t in RETIRED], tasks_per_family=6, seed=seed)
    assert all(retired.values()), retired
    assert any("list_contacts()" in win for win in retired["contact_email"])
