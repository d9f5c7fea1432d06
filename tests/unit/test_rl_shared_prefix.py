"""Shared-prefix log-probs: a group's common prompt encoded once, training-equivalent to the plain path."""

import copy
import logging

import pytest
import torch
import transformers

from coevolve.rl.batch import SampleBatch
from coevolve.rl.logprobs import token_logprobs
from coevolve.rl.plan import plan_update
from coevolve.rl.shared_prefix import common_prefix_length, shared_prefix_logprobs, supports_shared_prefix
from coevolve.rl.update import UpdateHyperparams, grpo_update
from tests.unit.test_rl_update import GradRecorder

VOCAB = 128


def tiny(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)  # fmt: skip
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common)).eval()


def multi_turn_batch(groups: int, k: int, vocab: int, prompt_len: int = 24, seed: int = 0) -> SampleBatch:
    """K samples per group sharing a prompt; each suffix is reply, masked tool output, reply."""
    g = torch.Generator().manual_seed(seed)
    ids, masks, rewards, group_ids = [], [], [], []
    for group in range(groups):
        prompt = torch.randint(3, vocab, (prompt_len,), generator=g).tolist()
        for sample in range(k):
            reply, tool, reply2 = (int(torch.randint(2, 9, (1,), generator=g)) for _ in range(3))
            suffix = torch.randint(3, vocab, (reply + tool + reply2,), generator=g).tolist()
            ids.append(prompt + suffix)
            masks.append([0] * prompt_len + [1] * reply + [0] * tool + [1] * reply2)
            rewards.append(float((sample + group) % 3 == 0))
            group_ids.append(group)
    return SampleBatch(ids, masks, rewards, group_ids)


def test_common_prefix_length():
    assert common_prefix_length([]) == 0
    assert common_prefix_length([[1, 2, 3]]) == 3
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[1, 2], [3, 2]]) == 0


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_logprobs_equal_the_plain_padded_pass(kind):
    model = tiny(kind)
    batch = multi_turn_batch(1, 5, VOCAB)
    padded = batch.pad(range(5))
    with torch.no_grad():
        plain = token_logprobs(model, padded.input_ids, padded.attention_mask, temperature=0.7)
        shared = shared_prefix_logprobs(model, batch.input_ids, temperature=0.7)
    assert shared.shape == plain.shape
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)


@pytest.mark.parametrize("reply_in_prefix", [False, True])
def test_scoring_only_the_loss_mask_keeps_those_logprobs(reply_in_prefix):
    model = tiny("llama")
    batch = multi_turn_batch(1, 4, VOCAB)
    ids, masks = [list(r) for r in batch.input_ids], [list(m) for m in batch.loss_mask]
    if reply_in_prefix:  # every sample starts its reply with the same 3 tokens: scored inside the prefix
        for row, m in zip(ids, masks, strict=True):
            row[24:24] = [7, 8, 9]
            m[24:24] = [1, 1, 1]
    scored_batch = SampleBatch(ids, masks, batch.rewards, batch.group_ids)
    padded = scored_batch.pad(range(4))
    with torch.no_grad():
        plain = token_logprobs(model, padded.input_ids, padded.attention_mask, temperature=0.7)
        shared = shared_prefix_logprobs(model, ids, temperature=0.7, score_rows=masks)
    keep = padded.loss_mask.bool()
    assert bool(keep[:, 24:27].all()) == reply_in_prefix
    torch.testing.assert_close(shared[keep], plain[keep], atol=1e-5, rtol=0)
    assert torch.equal(shared[:, :24], torch.zeros(4, 24))  # the prompt is never projected


def test_nothing_to_share_returns_none():
    model = tiny("llama")
    assert shared_prefix_logprobs(model, [[5, 6, 7]]) is None
    assert shared_prefix_logprobs(model, [[5, 6, 7], [8, 6, 7]]) is None
    assert shared_prefix_logprobs(model, [[5, 6, 7], [5, 9, 7]]) is None  # lcp 1: nothing before it


def test_by_group_plan_never_mixes_groups():
    batch = multi_turn_batch(3, 4, VOCAB)
    plan = plan_update(batch, list(range(12)), 2, 3, by_group=True)
    micros = [micro for mini in plan for micro in mini]
    assert sorted(i for micro in micros for i in micro) == list(range(12))
    assert all(len({batch.group_ids[i] for i in micro}) == 1 and len(micro) <= 3 for micro in micros)


def update_grads(model, batch, *, shared: bool, beta: float):
    model = copy.deepcopy(model)
    ref = copy.deepcopy(model) if beta > 0 and not hasattr(model, "disable_adapter") else None
    recorder = GradRecorder(model)
    hp = UpdateHyperparams(lr=1e-3, beta=beta, micro_batch_size=4, temperature=0.9, shared_prefix=shared,
                           max_grad_norm=None)  # fmt: skip
    result = grpo_update(model, ref, recorder, batch, hp)
    return recorder.grads[0], result


def assert_training_equivalent(model, batch, beta):
    plain_grads, plain = update_grads(model, batch, shared=False, beta=beta)
    shared_grads, shared = update_grads(model, batch, shared=True, beta=beta)
    assert plain.groups_with_signal > 0 and plain.optimizer_steps == shared.optimizer_steps == 1
    assert shared.loss == pytest.approx(plain.loss, abs=1e-5)
    assert shared.kl == pytest.approx(plain.kl, abs=1e-5)
    assert plain_grads.keys() == shared_grads.keys()
    scale = max(float(g.abs().max()) for g in plain_grads.values())
    assert scale > 1e-3  # the check is not vacuous
    # float32 sums in another order: relative to the largest gradient (SmolLM2 differs by 1.2e-5 on some CPUs)
    worst = max(float((plain_grads[n] - shared_grads[n]).abs().max()) for n in plain_grads)
    assert worst <= 1e-5 * max(1.0, scale), f"gradients differ by {worst} (largest gradient {scale})"


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_update_loss_and_gradients_equal_the_plain_path(kind, beta):
    assert_training_equivalent(tiny(kind), multi_turn_batch(2, 4, VOCAB), beta)


def test_lora_update_with_the_disabled_adapter_as_reference_is_equivalent():
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    model = peft.get_peft_model(tiny("llama"), config)
    for name, p in model.named_parameters():  # LoRA B starts at 0: give the adapter an effect (KL > 0)
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.3)
    assert supports_shared_prefix(model)
    assert_training_equivalent(model, multi_turn_batch(2, 4, VOCAB), beta=0.05)


def test_unsupported_architecture_takes_the_plain_path_and_warns_once(caplog, monkeypatch):
    model = tiny("llama")
    monkeypatch.setattr(model.config, "model_type", "made-up-arch")
    batch = multi_turn_batch(2, 4, VOCAB)
    with caplog.at_level(logging.WARNING, logger="coevolve.rl.shared_prefix"):
        assert not supports_shared_prefix(model)
        grads, _ = update_grads(model, batch, shared=True, beta=0.0)
    assert sum("made-up-arch" in r.getMessage() for r in caplog.records) == 1
    plain, _ = update_grads(model, batch, shared=False, beta=0.0)
    assert all(torch.equal(grads[n], plain[n]) for n in plain)


@pytest.mark.slow
def test_smollm2_update_is_training_equivalent():
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.models import load_model

    model, tokenizer = load_model("smollm2-135m")
    chat = [{"role": "user", "content": "List the files in the current directory, then read notes.txt."}]
    prompt = ChatFormat(tokenizer).prompt_ids(chat, tools=[])
    batch = multi_turn_batch(2, 4, model.config.vocab_size, prompt_len=len(prompt))
    ids = [prompt + row[len(prompt) :] for row in batch.input_ids]
    batch = SampleBatch(ids, batch.loss_mask, batch.rewards, batch.group_ids)
    assert_training_equivalent(model.float(), batch, beta=0.05)
