"""HfEngine on the tiny random Llama: token-in/token-out, stops, padding, log-probs, seeds, weights."""

from __future__ import annotations

import pytest
import torch

from coevolve.llm.engine import Completion, Engine, SamplingParams
from coevolve.llm.hf_engine import HfEngine, sample_next
from coevolve.llm.models import load_model

GREEDY = SamplingParams(greedy=True, max_new_tokens=12)


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = load_model("tiny-random-llama")
    return HfEngine(model, tokenizer, batch_size=4)


@pytest.fixture(scope="module")
def prompts(engine):
    texts = [
        "<|im_start|>user\nWhat is the balance of account A1?<|im_end|>\n<|im_start|>assistant\n",
        "Hi",
        "a b c d e f",
    ]
    return [engine.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_engine_satisfies_protocol(engine):
    assert isinstance(engine, Engine)
    assert engine.version == "base"


def test_completions_have_matching_ids_and_logprobs(engine, prompts):
    out = engine.generate(prompts, SamplingParams(max_new_tokens=10, seed=0))
    assert len(out) == len(prompts) and all(isinstance(c, Completion) for c in out)
    for c in out:
        assert 1 <= len(c.token_ids) == len(c.logprobs) <= 10
        assert all(lp <= 0 for lp in c.logprobs)
        assert c.finish_reason == ("stop" if c.token_ids[-1] in engine.eos_ids else "length")
        assert all(t not in engine.eos_ids for t in c.token_ids[:-1])  # nothing after the stop


def test_stops_at_extra_stop_token_and_keeps_it(engine, prompts):
    free = engine.generate(prompts[:1], GREEDY)[0]
    stop = free.token_ids[3]
    first = free.token_ids.index(stop)
    out = engine.generate(
        prompts[:1], SamplingParams(greedy=True, max_new_tokens=12, stop_token_ids=(stop,))
    )[0]
    assert out.token_ids == free.token_ids[: first + 1]
    assert out.finish_reason == "stop"
    assert out.text == engine.tokenizer.decode(free.token_ids[:first])


def test_a_row_that_stops_early_leaves_the_others_unchanged(engine, prompts):
    free = engine.generate(prompts, GREEDY)
    stop = free[0].token_ids[1]
    others = [c for c in free[1:] if stop not in c.token_ids]
    assert others, "fixture prompts should not all produce the stop token"
    out = engine.generate(prompts, SamplingParams(greedy=True, max_new_tokens=12, stop_token_ids=(stop,)))
    assert out[0].token_ids == free[0].token_ids[: free[0].token_ids.index(stop) + 1]
    for f, o in zip(free[1:], out[1:], strict=True):
        if f in others:
            assert o.token_ids == f.token_ids and o.finish_reason == "length"
            assert o.logprobs == pytest.approx(f.logprobs, abs=1e-5)


def test_stops_at_eos(engine, prompts):
    eos = engine.tokenizer.eos_token_id
    head = engine.model.get_output_embeddings()

    def force_eos(module, inputs, logits):
        logits = logits.clone()
        logits[..., eos] += 100.0
        return logits

    handle = head.register_forward_hook(force_eos)
    try:
        out = engine.generate(prompts, GREEDY)
    finally:
        handle.remove()
    for c in out:
        assert c.token_ids == [eos] and c.finish_reason == "stop" and c.text == ""
        assert c.logprobs[0] == pytest.approx(0.0, abs=1e-4)


def test_left_padding_does_not_change_results(engine, prompts):
    long, short = prompts[0], prompts[1]
    assert len(long) > len(short)
    batched = engine.generate([long, short], GREEDY)
    alone = [engine.generate([p], GREEDY)[0] for p in (long, short)]
    for b, a in zip(batched, alone, strict=True):
        assert b.token_ids == a.token_ids
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)


def test_sub_batching_and_progress(engine, prompts):
    many = prompts * 3  # 9 prompts, batch_size 4: sub-batches of 4, 4, 1
    seen = []
    out = engine.generate(many, GREEDY, progress=seen.append)
    assert seen == [4, 4, 1]
    alone = engine.generate(prompts, GREEDY)
    assert [c.token_ids for c in out] == [c.token_ids for c in alone] * 3


@pytest.mark.parametrize(
    "sampling", [SamplingParams(temperature=0.7, top_p=0.9, seed=1, max_new_tokens=16), GREEDY]
)
def test_logprobs_match_a_fresh_forward_pass(engine, prompts, sampling):
    out = engine.generate(prompts, sampling)
    for prompt, c in zip(prompts, out, strict=True):
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            logits = engine.model(ids).logits[0, len(prompt) - 1 : -1].float()
        expected = torch.log_softmax(logits / sampling.effective_temperature, dim=-1)
        expected = expected.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(expected, torch.tensor(c.logprobs), atol=1e-4)


def test_seeded_sampling_is_reproducible(engine, prompts):
    sampling = SamplingParams(temperature=1.0, seed=7, max_new_tokens=16)
    first = engine.generate(prompts, sampling)
    again = engine.generate(prompts, sampling)
    other = engine.generate(prompts, SamplingParams(temperature=1.0, seed=8, max_new_tokens=16))
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert [c.token_ids for c in first] != [c.token_ids for c in other]


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    params = SamplingParams(temperature=1.0, top_p=0.7)
    drawn = {int(sample_next(logits, params, torch.Generator().manual_seed(s))[0]) for s in range(200)}
    assert drawn == {0, 1}
    token, logprob = sample_next(logits, params, torch.Generator().manual_seed(0))
    assert float(logprob) == pytest.approx(float(torch.log_softmax(logits, -1)[0, token]))  # untruncated


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3, 0.0])
    logits = torch.log(probs).expand(20_000, -1)
    tokens, _ = sample_next(logits, SamplingParams(temperature=1.0), torch.Generator().manual_seed(0))
    freq = torch.bincount(tokens, minlength=6) / len(tokens)
    assert torch.allclose(freq, probs, atol=0.015)
    assert freq[[0, 2, 5]].sum() == 0  # zero-probability tokens are never drawn


def test_train_mode_is_restored(engine, prompts):
    engine.model.train()
    try:
        engine.generate(prompts[:1], SamplingParams(greedy=True, max_new_tokens=2))
        assert engine.model.training
    finally:
        engine.model.eval()


def test_update_weights_from_state_dict_and_directory(tmp_path, prompts):
    model, tokenizer = load_model("tiny-random-llama")
    engine = HfEngine(model, tokenizer)
    before = engine.generate(prompts, GREEDY)
    engine.update_weights(model)  # the CPU path: the trainer trained this very object
    other, _ = load_model("tiny-random-llama")
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    other.save_pretrained(tmp_path / "ckpt")
    engine.update_weights(tmp_path / "ckpt")
    assert torch.equal(model.lm_head.weight, other.lm_head.weight)  # tied weight loaded via its twin
    updated = engine.generate(prompts, GREEDY)
    assert [c.token_ids for c in updated] != [c.token_ids for c in before]
    engine.update_weights(load_model("tiny-random-llama")[0].state_dict())
    assert [c.token_ids for c in engine.generate(prompts, GREEDY)] == [c.token_ids for c in before]
    with pytest.raises(ValueError, match="unexpected"):
        engine.update_weights({"not.a.weight": torch.zeros(1)})


def test_sampling_params_validate():
    with pytest.raises(ValueError, match="greedy"):
        SamplingParams(temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    assert SamplingParams(temperature=0.0, greedy=True).effective_temperature == 1.0
