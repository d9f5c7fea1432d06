"""`rollout.max_staleness`: which policy a round's rollout samples with (in its cache key), a second model
that never shares weights with the trained one, where the next round's rollout overlaps, and the configs
refused. The flow end to end (overlap, kill and resume): tests/integration/test_staleness.py."""

from __future__ import annotations

import pytest

from coevolve.config import ConfigError, load_config
from coevolve.pipeline.runner import run_stage, stage_key
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.grpo_update.stage import GRPO_UPDATE
from coevolve.stages.rollout.stage import POLICY, ROLLOUT
from coevolve.stages.round_plan import rollout_ahead_beside
from tests.conftest import CONFIGS, fake_context

STALE = ("rollout.max_staleness=1", "train.vllm_importance_sampling_correction=true")


def config(*overrides: str):
    return load_config(CONFIGS / "test-tiny.yaml", ["train.weight_decay=0.1", *overrides])


def test_round_r_samples_with_the_policy_after_round_r_minus_1_minus_s(tmp_path, tokenizer):
    ctx = fake_context(config(*STALE), tmp_path, tokenizer)
    run_stage(BOOTSTRAP, ctx, 0)
    for round_ in (0, 1):
        run_stage(ROLLOUT, ctx, round_)
        run_stage(GRPO_UPDATE, ctx, round_)
    assert [POLICY.policy_round(ctx, r) for r in range(4)] == [-1, -1, 0, 1]
    two = run_stage(ROLLOUT, ctx, 2).manifest
    assert two.outputs["policy_version"] == ctx.policy_after(0)[0] != ctx.policy.version  # trained: round 1's
    assert two.outputs["policy_checkpoint"] == "checkpoints/round=0"
    stale = ctx.use_stale_policy(0)
    assert stale is not ctx.policy and stale.model is not ctx.policy.model
    differs = [name for (name, a), b in zip(stale.model.named_parameters(), ctx.policy.model.parameters(),
                                            strict=True) if not a.equal(b)]  # fmt: skip
    assert differs, "the stale model holds round 0's weights, the trained one round 1's"
    # synchronous, round 2 reads round 1's policy; the same stale config keys round 2 the same
    synchronous = fake_context(config(), tmp_path, tokenizer)
    assert POLICY.policy_round(synchronous, 2) == 1
    assert stage_key(ROLLOUT, fake_context(config(*STALE), tmp_path, tokenizer), 2) == two.key


def test_the_next_rollout_overlaps_the_update_only_when_its_dataset_exists_before_it():
    assert rollout_ahead_beside(config(), 0) is None
    assert rollout_ahead_beside(config(*STALE), 0) is GRPO_UPDATE
    after = config(*STALE, "evolve.every=1", "evolve.verify_after_update=true")
    assert rollout_ahead_beside(after, 0) is None  # D_{r+1} is merged after the update


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.servers=[http://127.0.0.1:9/v1]"], "model.servers"),
    (["train.keep_checkpoints=1"], "train.keep_checkpoints"),
    ([], "train.vllm_importance_sampling_correction"),
])  # fmt: skip
def test_a_staleness_the_run_cannot_honour_is_refused_naming_the_field(overrides, message):
    correction = [] if not overrides else ["train.vllm_importance_sampling_correction=false"]
    with pytest.raises(ConfigError, match=message) as info:
        config("rollout.max_staleness=1", *correction, *overrides)
    assert "rollout.max_staleness" in str(info.value)
