"""The loss's normalisation (`train.loss_normalization`): what each choice divides by, by hand; the default is
the loss every run so far used; the paper configs set the paper's loss; every extension says it is one."""

import math
import typing

import pytest
import torch

from coevolve.config import CoevolveConfig, TrainConfig, load_config
from coevolve.flows.dry_run import EXTENSIONS
from coevolve.rl.batch import SampleBatch
from coevolve.rl.hyperparams import update_hyperparams
from coevolve.rl.loss import grpo_loss
from coevolve.rl.plan import LossNormalization, row_divisors, shard_plan
from coevolve.rl.update import UpdateHyperparams, grpo_update
from tests.conftest import CONFIGS
from tests.unit.test_rl_update import GradRecorder, make_batch, tiny_llama

LN2 = math.log(2.0)
HP = {"clip_low": 0.2, "clip_high": 0.28, "beta": 0.1}
PAPER_CONFIGS = ("bfcl-qwen3-4b.yaml", "appworld-qwen3-4b.yaml")


def unequal_batch() -> SampleBatch:
    """Group 0: rows of 2 and 4 policy tokens; group 1: rows of 1 and 1 (N = 8, G = 2, B = 4)."""
    masks = [[0, 1, 1], [0, 1, 1, 1, 1], [0, 0, 1], [0, 1]]
    return SampleBatch([[5] * len(m) for m in masks], masks, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1])


def test_row_divisors_of_each_normalisation_by_hand():
    batch, rows = unequal_batch(), [0, 1, 2, 3]
    assert row_divisors(batch, rows, "batch_tokens") == {}  # one scalar N = 8 instead
    assert row_divisors(batch, rows, "group_tokens") == {0: 12.0, 1: 12.0, 2: 4.0, 3: 4.0}  # N_g * G
    assert row_divisors(batch, rows, "sequence") == {0: 8.0, 1: 16.0, 2: 4.0, 3: 4.0}  # |tau_i| * B
    # over two processes each holds half the micro-batches, but divides by the whole mini-batch's numbers
    plan = [[[0, 1], [2, 3]]]
    for rank in (0, 1):
        (shard,) = shard_plan(batch, plan, rank, 2, normalization="group_tokens")
        assert shard.divisors == {0: 12.0, 1: 12.0, 2: 4.0, 3: 4.0} and shard.num_tokens == 8


def test_per_row_divisors_in_the_loss_by_hand():
    """The 2x3 case of test_rl_loss (row 0: surrogate -1 - 1.28, k3 0 + 1 - ln2; row 1: 0.45 + 0.40 + 0.55,
    k3 1 - ln2 + ln2 - 1/2 + 0), row 0 divided by 2 and row 1 by 6."""
    from tests.unit.test_rl_loss import _hand_case

    lp, old, ref, adv, mask = _hand_case()
    loss, m = grpo_loss(lp, old, ref, adv, mask, **HP, num_tokens=torch.tensor([2.0, 6.0]))
    expected = (-2.28 + 0.1 * (1 - LN2)) / 2 + (1.40 + 0.1 * 0.5) / 6
    assert loss.item() == pytest.approx(expected, abs=1e-12) and m.loss == pytest.approx(expected, abs=1e-12)
    assert m.kl == pytest.approx((1.5 - LN2) / 5, abs=1e-12) and m.tokens == 5  # metrics stay token means
    loss.backward()
    assert lp.grad[0, 0].item() == pytest.approx(-1 / 2) and lp.grad[1, 2].item() == pytest.approx(0.55 / 6)


def _losses(batch: SampleBatch, normalization: LossNormalization, fixed_tokens: int = 3) -> float:
    """The loss `grpo_update` would take for `batch` as one mini-batch of per-row micro-batches."""
    g = torch.Generator().manual_seed(0)
    rows = list(range(len(batch)))
    plan = [[[i] for i in rows]]
    (shard,) = shard_plan(batch, plan, normalization=normalization, fixed_tokens=fixed_tokens)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    total = 0.0
    for i in rows:
        padded = batch.pad([i])
        old = -torch.rand(padded.loss_mask.shape, generator=g, dtype=torch.float64)
        lp = old + 0.1 * torch.randn(old.shape, generator=g, dtype=torch.float64)
        loss, _ = grpo_loss(lp, old, None, adv[[i]], padded.loss_mask, clip_low=0.2, clip_high=0.2, beta=0.0,
                            num_tokens=shard.normaliser([i]))  # fmt: skip
        total += loss.item()
    return total


def test_the_normalisations_differ_on_rows_of_unequal_lengths():
    batch = unequal_batch()
    values = {n: _losses(batch, n) for n in typing.get_args(LossNormalization)}
    assert len({round(v, 12) for v in values.values()}) == 4, values
    equal = SampleBatch([[5, 5, 5]] * 4, [[0, 1, 1]] * 4, [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1])
    same = [_losses(equal, n, fixed_tokens=2) for n in typing.get_args(LossNormalization)]
    assert same == pytest.approx([same[0]] * 4, abs=1e-15)  # equal lengths (the constant's), groups: one loss


def _grads(batch: SampleBatch, normalization: LossNormalization) -> dict[str, torch.Tensor]:
    model = tiny_llama()
    recorder = GradRecorder(model)
    hp = UpdateHyperparams(lr=0.0, max_grad_norm=None, micro_batch_size=4, loss_normalization=normalization)
    grpo_update(model, None, recorder, batch, hp)
    (grads,) = recorder.grads
    return grads


def test_group_tokens_averages_each_groups_own_token_mean_and_batch_tokens_weighs_by_tokens():
    """grpo_update's gradient: `group_tokens` on two groups is the mean of each group's update alone,
    `batch_tokens` their mean weighted by policy tokens; the two differ when the groups' token counts do."""
    signal = [1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0]
    both = make_batch(signal, seed=8)  # 16 and 26 policy tokens
    halves = (slice(0, 4), slice(4, 8))
    alone = [SampleBatch(both.input_ids[s], both.loss_mask[s], both.rewards[s], [0] * 4) for s in halves]
    n = [b.policy_tokens(range(4)) for b in alone]
    assert n[0] != n[1]
    single = [_grads(b, "batch_tokens") for b in alone]
    group, tokens = _grads(both, "group_tokens"), _grads(both, "batch_tokens")
    for name, grad in group.items():
        torch.testing.assert_close(grad, (single[0][name] + single[1][name]) / 2, rtol=1e-4, atol=1e-7)
        weighted = (n[0] * single[0][name] + n[1] * single[1][name]) / (n[0] + n[1])
        torch.testing.assert_close(tokens[name], weighted, rtol=1e-4, atol=1e-7)
    assert any(not torch.allclose(group[k], tokens[k], rtol=1e-3, atol=1e-6) for k in group)


def test_the_default_is_the_loss_of_every_run_so_far():
    """`batch_tokens` hands `grpo_loss` the mini-batch's policy-token count as one integer, exactly the
    argument it had before the choice existed, so its losses and gradients are bit for bit those."""
    assert TrainConfig().loss_normalization == UpdateHyperparams(lr=1.0).loss_normalization == "batch_tokens"
    assert update_hyperparams(CoevolveConfig(train={"loss_normalization": "sequence"}), 0).loss_normalization == "sequence"
    batch = unequal_batch()
    (shard,) = shard_plan(batch, [[[0, 1], [2, 3]]])
    assert shard.divisors == {} and type(shard.normaliser([0, 1])) is int and shard.normaliser([2, 3]) == 8
    assert typing.get_args(TrainConfig.model_fields["loss_normalization"].annotation) == typing.get_args(
        LossNormalization
    )


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_the_paper_configs_set_the_papers_loss_and_no_extension(name):
    config = load_config(CONFIGS / name)
    train = config.train
    assert train.loss_normalization == "group_tokens"
    assert train.clip_high == train.clip_low  # one epsilon
    assert train.beta > 0  # a KL term; zero-advantage rows then stay in the token counts
    assert train.mini_batches * train.epochs > 1  # the clip acts from the second optimizer step
    assert config.rollout.tasks_per_round % train.mini_batches == 0
    assert {p: config.value(p) for p in EXTENSIONS} == {p: off for p, (off, _) in EXTENSIONS.items()}


def _description(path: str) -> str:
    section, field = path.split(".")
    return type(getattr(CoevolveConfig(), section)).model_fields[field].description or ""


@pytest.mark.parametrize("path", [*EXTENSIONS, "train.clip_high", "train.beta"])
def test_every_extension_says_so_in_the_config_reference(path):
    assert "extension, not the paper's" in " ".join(_description(path).split()).lower(), path
