"""The paper's ablation arms run on a paper config with the paper's N and F: `coevolve bench learning
--regime ablation --config configs/bfcl-qwen3-4b.yaml` makes each arm's config as the paper's row has it,
and each arm's dry run passes (no weights are loaded)."""

from __future__ import annotations

import pytest

from coevolve.benchmarks.learning.arms import REGIMES, Plan, run_overrides
from coevolve.config import ConfigError, PolicyTeacherConfig, load_config
from coevolve.flows.dry_run import dry_run
from tests.conftest import CONFIGS

BFCL = CONFIGS / "bfcl-qwen3-4b.yaml"
ABLATION = REGIMES["ablation"].arms


def test_the_weak_explorer_on_a_paper_config_is_the_policy_keeping_the_sections_sampling():
    config = load_config(BFCL, ["teacher.type=policy"])
    assert isinstance(config.teacher, PolicyTeacherConfig)
    assert (config.teacher.temperature, config.teacher.max_new_tokens) == (0.7, 2048)
    with pytest.raises(ConfigError, match="teacher.policy.no_such_field"):
        load_config(BFCL, ["teacher.type=policy", "teacher.no_such_field=1"])


@pytest.fixture(scope="module")
def plan() -> Plan:
    return Plan.make(quick=False, config=BFCL, regime="ablation")


def test_a_paper_config_starts_every_arm_from_the_base_model_with_its_own_teacher(plan):
    assert plan.warm_start is None and plan.teacher is None
    assert not any(o.startswith(("eval.splits", "teacher.")) for o in run_overrides(plan, "coevolve", 0))


@pytest.mark.parametrize("arm", ABLATION)
def test_every_ablation_arm_dry_runs_on_the_paper_config_with_the_papers_n_and_f(plan, arm):
    config = load_config(BFCL, run_overrides(plan, arm, 0))
    text = dry_run(config)
    assert "differs from the paper:" in text and config.eval.splits == ("ae-test",)
    evolve, n = config.evolve.every, config.dataset.bootstrap_tasks
    expected = {"grpo": (0, 100), "synthetic-data": (0, 100), "evolve-often": (2, 100), "evolve-rarely": (40, 100)}
    assert (evolve, n) == expected.get(arm, (10, 100))
    assert config.teacher.type == ("policy" if arm == "weak-explorer" else "openai")
