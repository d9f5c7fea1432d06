"""The knobs a TRL user reaches for, under GRPOConfig's names: the lr schedule and its warmup (the rate of
each optimizer step of the run, the same after a resume), `loss_type` (the loss of a hand-made batch under
each), `scale_rewards` (advantages with and without the std) and dropping zero-std groups (counted); bad
values refused in one line naming the field; the defaults and the paper configs keep today's and the paper's.
"""

import copy
import math

import pytest
import torch

from coevolve.config import CoevolveConfig, ConfigError, TrainConfig, load_config, parse_config
from coevolve.rl.advantages import group_advantages
from coevolve.rl.batch import SampleBatch
from coevolve.rl.hyperparams import update_hyperparams
from coevolve.rl.loss import grpo_loss
from coevolve.rl.plan import shard_plan
from coevolve.rl.schedule import LrSchedule
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer
from tests.conftest import CONFIGS
from tests.unit.test_rl_loss import _hand_case
from tests.unit.test_rl_update import SIGNAL, GradRecorder, make_batch, params, tiny_llama

PAPER_CONFIGS = ("bfcl-qwen3-4b.yaml", "appworld-qwen3-4b.yaml")


def hp_of(round_: int = 0, **train) -> UpdateHyperparams:
    return update_hyperparams(CoevolveConfig(train=train), round_)


# ---------------------------------------------------------------- lr schedule


@pytest.mark.parametrize(("schedule", "factors"), [
    (LrSchedule("constant_with_warmup", 4), [0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0]),
    (LrSchedule("linear", 0, 4), [1.0, 0.75, 0.5, 0.25, 0.0, 0.0, 0.0]),  # past T: the end, 0
    (LrSchedule("linear", 2, 6), [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]),
    (LrSchedule("cosine", 2, 6), [0.0, 0.5, 1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5,
                                  (1 + math.cos(3 * math.pi / 4)) / 2, 0.0]),
])  # fmt: skip
def test_schedule_factor_at_each_step_by_hand(schedule, factors):
    assert [schedule.factor(i) for i in range(7)] == pytest.approx(factors, abs=1e-12)
    assert schedule.factor(100) == pytest.approx(factors[-1])  # no second cycle past the horizon


def test_config_counts_steps_across_rounds_and_warmup_ratio_of_the_horizon():
    """mini_batches 2 x epochs 1 = 2 steps a round; 4 rounds = 8 steps; warmup 0.25 of them = 2 steps."""
    train = {"lr": 1e-3, "lr_scheduler_type": "cosine", "warmup_ratio": 0.25, "schedule_rounds": 4,
             "mini_batches": 2}
    rates = [hp_of(r, **train).step_lr(k) for r in range(5) for k in range(2)]
    cosine = [(1 + math.cos(math.pi * j / 6)) / 2 for j in range(7)]
    assert rates == pytest.approx([1e-3 * f for f in [0.0, 0.5, *cosine, 0.0]], abs=1e-15)
    assert hp_of(3, **train).first_step == 6


def test_a_constant_rate_leaves_the_optimizer_alone():
    assert hp_of().lr_schedule is None and hp_of(lr_scheduler_type="constant_with_warmup").lr_schedule is None
    assert hp_of(lr_scheduler_type="constant_with_warmup", warmup_steps=3).lr_schedule is not None


def _rounds(model, optimizer, train: dict, rounds: range) -> list[float]:
    """The learning rate each optimizer step of these rounds' updates logged, in order."""
    batch = make_batch(SIGNAL)
    return [s["learning_rate"] for r in rounds
            for s in grpo_update(model, None, optimizer, batch, hp_of(r, **train)).steps]  # fmt: skip


def test_scheduled_rates_are_logged_and_the_same_after_a_resume():
    """Warmup's first step has rate 0 (weights unchanged); a run continued from a checkpoint's weights and
    optimizer state, or with a fresh optimizer, steps at the rates of the uninterrupted run."""
    train = {"lr": 1e-2, "lr_scheduler_type": "linear", "warmup_steps": 2, "schedule_rounds": 3,
             "mini_batches": 2}
    expected = [0.0, 5e-3, 1e-2, 7.5e-3, 5e-3, 2.5e-3]  # rounds of 2 steps; T = 6 steps, W = 2

    model = tiny_llama()
    start = params(model)
    warming = hp_of(0, lr=1e-2, lr_scheduler_type="constant_with_warmup", warmup_steps=2)  # one step a round
    first = grpo_update(model, None, make_optimizer(model, 1e-2), make_batch(SIGNAL), warming)
    assert first.steps[0]["learning_rate"] == 0.0 == first.lr
    assert all(torch.equal(start[k], v) for k, v in params(model).items())  # a 0 rate moves nothing

    model = tiny_llama()
    optimizer = make_optimizer(model, 1e-2)
    uninterrupted = _rounds(model, optimizer, train, range(2))
    saved_weights, saved_state = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    uninterrupted += _rounds(model, optimizer, train, range(2, 3))
    assert uninterrupted == pytest.approx(expected, abs=1e-15)

    resumed = tiny_llama(seed=1)
    resumed.load_state_dict(saved_weights)
    resumed_optimizer = make_optimizer(resumed, 1e-2)
    resumed_optimizer.load_state_dict(saved_state)  # holds the rate of round 1's last step
    assert resumed_optimizer.param_groups[0]["lr"] == pytest.approx(7.5e-3)
    assert _rounds(resumed, resumed_optimizer, train, range(2, 3)) == pytest.approx(expected[4:], abs=1e-15)
    assert all(torch.equal(v, params(model)[k]) for k, v in params(resumed).items())  # the same weights

    restarted = tiny_llama(seed=1)
    restarted.load_state_dict(saved_weights)
    fresh = make_optimizer(restarted, 1e-2)  # its state dropped: the rates still follow the step
    assert _rounds(restarted, fresh, train, range(2, 3)) == pytest.approx(expected[4:], abs=1e-15)


# ---------------------------------------------------------------- loss_type


def _hand_loss(**train) -> float:
    """The hand case of test_rl_loss (row 0: 2 policy tokens, surrogates summing to -2.28; row 1: 3 tokens,
    summing to 1.40) as one mini-batch of two groups, normalised as `train` says."""
    lp, old, _, adv, mask = _hand_case()
    hp = hp_of(**train)
    batch = SampleBatch([[5] * 3, [5] * 4], [[0, 1, 1], [0, 1, 1, 1]], [1.0, 0.0], [0, 1])
    normalization, fixed_tokens = hp.loss_normalization, hp.fixed_tokens
    (shard,) = shard_plan(batch, [[[0, 1]]], normalization=normalization, fixed_tokens=fixed_tokens)
    loss, _ = grpo_loss(lp, old, None, adv, mask, clip_low=0.2, clip_high=0.28, beta=0.0,
                        num_tokens=shard.normaliser([0, 1]))  # fmt: skip
    return loss.item()


@pytest.mark.parametrize(("train", "expected"), [
    ({"loss_type": "dapo"}, (-2.28 + 1.40) / 5),  # every token of the step
    ({"loss_type": "grpo"}, (-2.28 / 2 + 1.40 / 3) / 2),  # each row's token mean, rows averaged
    ({"loss_type": "dr_grpo", "fixed_tokens": 4}, (-2.28 + 1.40) / (2 * 4)),  # a constant times the rows
    ({"loss_normalization": "group_tokens"}, -2.28 / (2 * 2) + 1.40 / (3 * 2)),  # the paper's, no TRL name
    ({}, (-2.28 + 1.40) / 5),  # the default: dapo
])  # fmt: skip
def test_loss_of_a_hand_made_batch_under_each_loss_type(train, expected):
    assert _hand_loss(**train) == pytest.approx(expected, abs=1e-12)


def test_loss_type_is_another_name_for_loss_normalization():
    named = [TrainConfig(loss_type=t, fixed_tokens=8).loss_normalization for t in ("dapo", "grpo", "dr_grpo")]
    assert named == ["batch_tokens", "sequence", "fixed_tokens"]
    assert TrainConfig(loss_type="grpo", loss_normalization="sequence").loss_type == "grpo"  # both, agreeing
    assert TrainConfig().loss_type == "dapo"
    assert TrainConfig(loss_normalization="group_tokens").loss_type is None
    assert "loss_type" not in TrainConfig(loss_type="grpo").model_dump()  # saved as loss_normalization


# ---------------------------------------------------------------- scale_rewards


def test_advantages_with_and_without_the_std():
    """Group 0: rewards 1, 0, 0, 0 (mean 1/4, population std sqrt(3)/4); group 1: 1, 1 (no signal)."""
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 0, 1, 1])
    centred = torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0])
    batch_std = float(rewards.std(correction=0))  # over all six rewards: mean 1/2, std 1/2
    cases = {"group": centred / (math.sqrt(3) / 4), "batch": centred / batch_std, "none": centred}
    for scale, expected in cases.items():
        torch.testing.assert_close(group_advantages(rewards, groups, eps=0.0, scale=scale), expected)
    scales = [hp_of(scale_rewards=v).scale_rewards for v in (True, False, "batch")]
    assert scales == ["group", "none", "batch"]


def test_without_the_std_the_update_moves_as_far_as_the_rewards_differ():
    """One group, ratio 1: the gradient is linear in the advantages: `none`'s is `group`'s times the std."""
    batch = make_batch([1.0, 0.0, 0.0, 0.0])
    grads = {}
    for scale in ("group", "none"):
        model = tiny_llama()
        recorder = GradRecorder(model)
        hp = UpdateHyperparams(lr=0.0, max_grad_norm=None, scale_rewards=scale)
        grpo_update(model, None, recorder, batch, hp)
        grads[scale] = recorder.grads[0]
    std = math.sqrt(3) / 4
    for name, grad in grads["none"].items():
        torch.testing.assert_close(grad, grads["group"][name] * (std + 1e-6), rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------------- dropping zero-std groups


def three_groups() -> SampleBatch:
    """Group 0 has signal; group 1 all solved, group 2 all failed (zero std)."""
    return make_batch([1.0, 0.0, 1.0, 0.0] + [1.0] * 4 + [0.0] * 4, seed=3)


def _update(batch: SampleBatch, **hp):
    model, reference = tiny_llama(), tiny_llama(seed=5)
    recorder = GradRecorder(model)
    settings = UpdateHyperparams(lr=0.0, max_grad_norm=None, **hp)
    result = grpo_update(model, reference, recorder, batch, settings)
    return result, recorder.grads[0]


def test_zero_std_groups_dropped_are_counted_and_leave_the_normaliser():
    batch = three_groups()
    kept, _ = _update(batch, beta=0.1)
    dropped, grads = _update(batch, beta=0.1, drop_zero_std_groups=True)
    assert (kept.groups_dropped, kept.trained_samples) == (0, 12)  # beta > 0: their KL term keeps them
    assert (dropped.groups_dropped, dropped.trained_samples, dropped.groups) == (2, 4, 3)
    assert dropped.tokens == batch.policy_tokens(range(4))
    alone = SampleBatch(batch.input_ids[:4], batch.loss_mask[:4], batch.rewards[:4], batch.group_ids[:4])
    _, alone_grads = _update(alone, beta=0.1)
    for name, grad in grads.items():  # as if the round had held group 0 only
        torch.testing.assert_close(grad, alone_grads[name], rtol=1e-5, atol=1e-8)
    plain, _ = _update(batch, beta=0.0)  # with beta 0 they are left out anyway
    assert (plain.groups_dropped, plain.trained_samples) == (2, 4)


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(("overrides", "field"), [
    (["train.loss_type=bnpo"], "train.loss_type"),
    (["train.loss_type=dapo", "train.loss_normalization=group_tokens"], "train.loss_type"),
    (["train.loss_type=dr_grpo"], "train.fixed_tokens"),
    (["train.scale_rewards=std"], "train.scale_rewards"),
    (["train.lr_scheduler_type=exponential"], "train.lr_scheduler_type"),
    (["train.lr_scheduler_type=cosine"], "train.schedule_rounds"),
    (["train.warmup_steps=5"], "train.lr_scheduler_type"),
    (["train.lr_scheduler_type=constant_with_warmup", "train.warmup_steps=2", "train.warmup_ratio=0.1",
      "train.schedule_rounds=4"], "train.warmup_ratio"),
    (["train.lr_scheduler_type=linear", "train.warmup_ratio=0.1"], "train.schedule_rounds"),
    (["train.warmup_steps=-1"], "train.warmup_steps"),
])  # fmt: skip
def test_bad_settings_are_refused_in_one_line_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as exc:
        parse_config({}, source="cfg.yaml", overrides=overrides)
    message = str(exc.value)
    assert "\n" not in message and field in message, message


def test_the_defaults_are_todays_update():
    hp, plain = hp_of(), UpdateHyperparams(lr=TrainConfig().lr)
    assert (hp.lr_schedule, hp.scale_rewards, hp.drop_zero_std_groups, hp.loss_normalization) == (
        None, "group", False, "batch_tokens")
    assert (plain.lr_schedule, plain.scale_rewards, plain.drop_zero_std_groups) == (None, "group", False)


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_the_paper_configs_keep_the_papers_settings(name):
    train = load_config(CONFIGS / name).train
    assert (train.lr_scheduler_type, train.warmup_steps, train.warmup_ratio) == ("constant", 0, 0.0)
    assert (train.scale_rewards, train.drop_zero_std_groups, train.loss_type) == ("group", False, None)


@pytest.mark.parametrize(("field", "trl"), [
    ("lr_scheduler_type", "lr_scheduler_type"), ("warmup_steps", "warmup_steps"),
    ("warmup_ratio", "warmup_ratio"), ("scale_rewards", "scale_rewards"), ("loss_normalization", "loss_type"),
    ("drop_zero_std_groups", None),
])  # fmt: skip
def test_each_knob_names_its_trl_name_and_says_what_extends_the_paper(field, trl):
    text = " ".join((TrainConfig.model_fields[field].description or "").split())
    assert f"TRL's `{trl}`" in text if trl else "no trl field" in text.lower()
    assert "not the paper's" in text


def test_a_run_steps_its_updates_at_the_scheduled_rates_round_after_round(tmp_path, tokenizer):
    """Through the stages: each round's update logs the rates of its own steps on the run's schedule."""
    from coevolve.config import load_config
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.round_plan import round_plan
    from tests.conftest import CONFIGS, fake_context

    config = load_config(CONFIGS / "test-tiny.yaml", [
        "train.lr_scheduler_type=linear", "train.schedule_rounds=2", "train.mini_batches=2", "train.lr=0.001"])
    ctx = fake_context(config, tmp_path, tokenizer)
    logged = []
    for round_ in range(2):
        for stage in round_plan(config, round_):
            run_stage(stage, ctx, round_)
        logged += [step["learning_rate"] for step in ctx.store.manifest(round_, "grpo_update").outputs["steps"]]
    assert logged == pytest.approx([0.001, 0.00075, 0.0005, 0.00025])  # 4 steps to 0, as transformers' linear
