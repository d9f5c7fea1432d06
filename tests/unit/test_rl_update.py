"""The GRPO update on a tiny random Llama: batching, log-probs, parameter updates, checkpoints."""

import copy

import pytest
import torch
import transformers

from coevolve.rl.batch import SampleBatch, micro_batches
from coevolve.rl.checkpoint import load_optimizer_state, load_weights, save_checkpoint
from coevolve.rl.logprobs import token_logprobs
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer, progress_total

VOCAB = 128


def tiny_llama(seed: int = 0) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def make_batch(rewards: list[float], group_size: int = 4, seed: int = 0) -> SampleBatch:
    """Rows of 6..13 tokens: a 3-token prompt, then policy tokens with a 2-token tool output inside."""
    g = torch.Generator().manual_seed(seed)
    ids, masks = [], []
    for _ in rewards:
        n = int(torch.randint(6, 14, (1,), generator=g))
        ids.append(torch.randint(0, VOCAB, (n,), generator=g).tolist())
        mask = [0, 0, 0] + [1] * (n - 3)
        mask[4:6] = [0, 0]
        masks.append(mask)
    groups = [i // group_size for i in range(len(rewards))]
    return SampleBatch(input_ids=ids, loss_mask=masks, rewards=rewards, group_ids=groups)


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


class GradRecorder(torch.optim.SGD):
    """An optimizer that records the gradients it is asked to apply and applies nothing."""

    def __init__(self, model):
        self.names = [n for n, _ in model.named_parameters()]
        super().__init__(model.parameters(), lr=0.0)
        self.grads: list[dict[str, torch.Tensor]] = []

    def step(self, closure=None):
        ps = self.param_groups[0]["params"]
        self.grads.append(
            {n: p.grad.clone() for n, p in zip(self.names, ps, strict=True) if p.grad is not None}
        )


SIGNAL = [1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0]  # two groups of four, both with variance

# ---------------------------------------------------------------- batch


def test_sample_batch_pads_right_and_validates():
    batch = SampleBatch([[5, 6, 7], [8, 9]], [[0, 1, 1], [0, 1]], [1.0, 0.0], [0, 0])
    padded = batch.pad([1, 0], pad_token_id=3)
    assert padded.input_ids.tolist() == [[8, 9, 3], [5, 6, 7]]
    assert padded.attention_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert padded.loss_mask.tolist() == [[0, 1, 0], [0, 1, 1]]
    assert batch.policy_tokens([0, 1]) == 3
    with pytest.raises(ValueError, match="row 0"):
        SampleBatch([[1, 2]], [[0]], [0.0], [0])
    with pytest.raises(ValueError, match="loss_mask\\[0\\]"):
        SampleBatch([[1, 2]], [[1, 1]], [0.0], [0])
    with pytest.raises(ValueError, match="one entry per row"):
        SampleBatch([[1, 2]], [[0, 1]], [0.0, 1.0], [0])


def test_micro_batches_sorted_by_length_and_bounded():
    lengths = [3, 9, 5, 7, 1]
    assert micro_batches(lengths, [0, 1, 2, 3, 4], 2) == [[1, 3], [2, 0], [4]]
    assert micro_batches(lengths, [4, 0], 8) == [[0, 4]]


# ---------------------------------------------------------------- log-probs


def test_token_logprobs_matches_log_softmax_and_ignores_padding():
    model = tiny_llama()
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    with torch.no_grad():
        got = token_logprobs(model, ids, mask, temperature=0.7)
        logits = model(input_ids=ids, attention_mask=mask).logits / 0.7
        direct = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        alone = token_logprobs(model, ids[1:, :5], mask[1:, :5], temperature=0.7)
    assert torch.equal(got[:, 0], torch.zeros(2))
    torch.testing.assert_close(got[0, 1:], direct[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(got[1, 1:5], direct[1, :4], rtol=0, atol=1e-5)
    assert torch.equal(got[1, 5:], torch.zeros(4))
    torch.testing.assert_close(got[1, :5], alone[0], rtol=0, atol=1e-5)


def test_with_a_score_mask_only_scored_positions_reach_the_vocabulary():
    model = tiny_llama()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    score = torch.zeros_like(ids)
    score[0, 3:5] = 1  # reply tokens of row 0
    score[1, 4:7] = 1  # and of row 1: positions 3..6 in all
    projected = []
    hook = model.lm_head.register_forward_hook(lambda m, args, out: projected.append(args[0].shape[1]))
    with torch.no_grad():
        full = token_logprobs(model, ids, mask, temperature=0.7)
        scored = token_logprobs(model, ids, mask, temperature=0.7, score_mask=score)
    hook.remove()
    assert projected == [11, 4]  # every position predicting a token, then only the 4 predicting 3..6
    union = torch.zeros_like(score, dtype=torch.bool)
    union[:, 3:7] = True
    torch.testing.assert_close(scored[union], full[union], rtol=0, atol=1e-6)
    assert torch.equal(scored[~union], torch.zeros(int((~union).sum())))


# ---------------------------------------------------------------- grpo_update


def test_update_with_signal_changes_parameters():
    model = tiny_llama()
    before = params(model)
    batch = make_batch(SIGNAL)
    calls = []
    hp = UpdateHyperparams(lr=1e-2, micro_batch_size=3)
    result = grpo_update(model, None, make_optimizer(model, hp.lr), batch, hp, progress=calls.append)
    after = params(model)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert result.optimizer_steps == 1 and result.groups == 2 and result.groups_with_signal == 2
    assert result.samples == result.trained_samples == 8
    assert result.tokens == batch.policy_tokens(range(8))
    assert result.grad_norm > 0 and result.lr == pytest.approx(1e-2)
    assert result.ratio_mean == pytest.approx(1.0, abs=1e-5)  # old log-probs recomputed: ratio 1
    assert result.clip_fraction == 0.0
    assert sum(calls) == progress_total(batch, hp) == 8
    assert len(calls) == 4  # micro-batches stay inside a group (shared prefix): 3 + 1 rows per group
    assert not model.training  # mode restored


def test_update_without_signal_does_nothing():
    model = tiny_llama()
    before = params(model)
    optimizer = make_optimizer(model, 1e-2, weight_decay=0.1)
    result = grpo_update(
        model, None, optimizer, make_batch([1.0] * 4 + [0.0] * 4), UpdateHyperparams(lr=1e-2)
    )
    after = params(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert result.optimizer_steps == 0 and result.tokens == 0 and result.trained_samples == 0
    assert result.groups_with_signal == 0 and result.grad_norm == 0.0 and result.loss == 0.0
    assert all(p.grad is None for p in model.parameters())


def test_zero_advantage_rows_are_dropped_when_beta_is_zero():
    model = tiny_llama()
    batch = make_batch([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5])  # second group has no signal
    result = grpo_update(model, None, GradRecorder(model), batch, UpdateHyperparams(lr=0.0))
    assert result.trained_samples == 4 and result.groups_with_signal == 1
    assert result.tokens == batch.policy_tokens(range(4))


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_micro_batch_size_does_not_change_the_gradient(mini_batches):
    batch = make_batch(SIGNAL)
    grads = []
    for mbs in (1, 4):
        model = tiny_llama()
        recorder = GradRecorder(model)
        hp = UpdateHyperparams(lr=0.0, micro_batch_size=mbs, mini_batches=mini_batches, max_grad_norm=None)
        result = grpo_update(model, None, recorder, batch, hp)
        assert result.optimizer_steps == mini_batches
        grads.append(recorder.grads)
    for g1, g4 in zip(*grads, strict=True):
        assert g1 and g1.keys() == g4.keys()
        for name in g1:
            torch.testing.assert_close(g1[name], g4[name], rtol=0, atol=1e-5)


def test_kl_needs_a_reference_and_is_zero_against_a_copy_on_the_first_step():
    model = tiny_llama()
    batch = make_batch(SIGNAL)
    hp = UpdateHyperparams(lr=1e-3, beta=0.05)
    with pytest.raises(ValueError, match="ref_model"):
        grpo_update(model, None, make_optimizer(model, hp.lr), batch, hp)
    ref = copy.deepcopy(model)
    result = grpo_update(model, ref, make_optimizer(model, hp.lr), batch, hp)
    assert result.kl == pytest.approx(0.0, abs=1e-6)
    flat = make_batch([1.0] * 8)  # no signal, but beta > 0 keeps the rows for the KL term
    assert grpo_update(model, ref, make_optimizer(model, hp.lr), flat, hp).kl > 0


def test_several_epochs_move_the_ratio_and_clip():
    model = tiny_llama()
    hp = UpdateHyperparams(lr=3e-2, epochs=4, mini_batches=2, clip_low=0.01, clip_high=0.01)
    result = grpo_update(model, None, make_optimizer(model, hp.lr), make_batch(SIGNAL), hp)
    assert result.optimizer_steps == 8
    assert result.clip_fraction > 0


def test_peft_model_uses_its_base_as_reference():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():  # LoRA B starts at 0: give the adapter an effect
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    before = params(model)
    hp = UpdateHyperparams(lr=1e-2, beta=0.1)
    result = grpo_update(model, None, make_optimizer(model, hp.lr), make_batch(SIGNAL), hp)
    after = params(model)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert result.kl > 0


# ---------------------------------------------------------------- checkpoints


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(VOCAB)}
    raw = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="t0", pad_token="t1")


def test_checkpoint_round_trip_is_exact(tmp_path):
    model = tiny_llama()
    hp = UpdateHyperparams(lr=1e-2)
    optimizer = make_optimizer(model, hp.lr)
    grpo_update(model, None, optimizer, make_batch(SIGNAL), hp)
    target = tmp_path / "ckpt" / "round=1"
    save_checkpoint(tiny_llama(seed=5), None, None, target)  # an older checkpoint to replace
    save_checkpoint(model, tiny_tokenizer(), optimizer, target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["round=1"]  # no temp dirs left

    loaded = tiny_llama(seed=9)
    load_weights(loaded, target, lora=False)
    saved = dict(model.state_dict())
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, saved[name]), name
    tokenizer = transformers.AutoTokenizer.from_pretrained(target)
    assert tokenizer("t5 t7")["input_ids"] == [5, 7]

    fresh = make_optimizer(loaded, hp.lr)
    load_optimizer_state(fresh, target)
    state = optimizer.state_dict()["state"]
    for key, value in fresh.state_dict()["state"].items():
        assert torch.equal(value["exp_avg"], state[key]["exp_avg"])


def test_load_weights_names_a_missing_or_incomplete_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_weights(tiny_llama(), tmp_path / "nowhere", lora=False)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="half.*incomplete"):
        load_weights(tiny_llama(), tmp_path / "half", lora=False)
    save_checkpoint(tiny_llama(), None, None, tmp_path / "no-opt")
    with pytest.raises(FileNotFoundError, match="optimizer.pt"):
        load_optimizer_state(make_optimizer(tiny_llama(), 1e-3), tmp_path / "no-opt")


def test_peft_checkpoint_saves_the_adapter_and_reloads_it(tmp_path):
    peft = pytest.importorskip("peft")
    tiny_llama().save_pretrained(tmp_path / "base")
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    save_checkpoint(model, None, None, tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert not (tmp_path / "adapter" / "model.safetensors").exists()
    fresh = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    loaded = peft.get_peft_model(fresh, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    load_weights(loaded, tmp_path / "adapter", lora=True)
    ids = torch.arange(10)[None]
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mini_batches", [1, 2])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_one_epoch_reuses_the_first_steps_forward_as_its_old_logprobs(beta, mini_batches, monkeypatch):
    """One epoch: the old-log-prob pass skips the first mini-batch (the weights cannot move before its
    step) and gives exactly the gradients of the update that computes it for every mini-batch."""
    import coevolve.rl.update as update

    batch = make_batch(SIGNAL)
    hp = UpdateHyperparams(lr=0.0, micro_batch_size=4, beta=beta, mini_batches=mini_batches)
    ref = tiny_llama(seed=1)
    fast = tiny_llama()
    recorded_fast = GradRecorder(fast)
    calls = []
    real = update._fixed_logprobs
    monkeypatch.setattr(update, "_fixed_logprobs", lambda *a, **k: calls.append((a[0], len(a[2]))) or real(*a, **k))
    grpo_update(fast, ref, recorded_fast, batch, hp)
    policy_passes = [mini_batches - 1] if mini_batches > 1 else []  # the later mini-batches only
    assert [n for model, n in calls if model is fast] == policy_passes
    assert [n for model, n in calls if model is ref] == ([mini_batches] if beta else [])

    slow = tiny_llama()  # the same weights, through the two-epoch path with lr 0 (= the steps, repeated)
    recorded_slow = GradRecorder(slow)
    grpo_update(slow, ref, recorded_slow, batch,
                UpdateHyperparams(lr=0.0, micro_batch_size=4, beta=beta, epochs=2, mini_batches=mini_batches))  # fmt: skip
    assert (slow, mini_batches) in calls
    assert len(recorded_fast.grads) == mini_batches
    for step, grads in enumerate(recorded_fast.grads):
        for name, grad in grads.items():
            torch.testing.assert_close(grad, recorded_slow.grads[step][name], rtol=1e-5, atol=1e-6)


def test_one_epoch_of_two_mini_batches_clips_the_second_step():
    """The second mini-batch's old log-probs are the weights before the first step, not its own forward:
    after a large first step its ratio leaves the clip range."""
    model = tiny_llama()
    hp = UpdateHyperparams(lr=3e-2, mini_batches=2, clip_low=0.01, clip_high=0.01)
    result = grpo_update(model, None, make_optimizer(model, hp.lr), make_batch(SIGNAL), hp)
    assert result.optimizer_steps == 2 and result.clip_fraction > 0


def test_shard_plan_deals_micro_batches_round_robin_and_keeps_the_whole_token_count():
    from coevolve.rl.plan import shard_plan

    batch = make_batch(SIGNAL)
    plan = [[[0, 1], [2, 3], [4, 5]], [[6, 7]]]
    whole = [batch.policy_tokens([0, 1, 2, 3, 4, 5]), batch.policy_tokens([6, 7])]
    first, second = shard_plan(batch, plan, 0, 2), shard_plan(batch, plan, 1, 2)
    assert [s.micro for s in first] == [[[0, 1], [4, 5]], [[6, 7]]]
    assert [s.micro for s in second] == [[[2, 3]], []]  # nothing to do in the second step: no gradient
    assert [s.num_tokens for s in first] == [s.num_tokens for s in second] == whole
    assert [s.padding for s in first] == [s.padding for s in second] == [[], []]
    # sharded weights: every process runs as many passes as the busiest one, padding with the first micro-batch
    lockstep = shard_plan(batch, plan, 1, 2, lockstep=True)
    assert [s.micro for s in lockstep] == [[[2, 3]], []] and [s.padding for s in lockstep] == [[[0, 1]], [[6, 7]]]
    assert [s.padding for s in shard_plan(batch, plan, 0, 2, lockstep=True)] == [[], []]
