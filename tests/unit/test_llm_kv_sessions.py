"""KV reuse across turns: the same tokens and log-probs as re-encoding the whole context, less prefill."""

from __future__ import annotations

import pytest

from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = load_model("tiny-random-llama")
    return HfEngine(model, tokenizer, batch_size=8)


def _conversation(engine, sessions, sampling):
    """Three rounds of: generate for 3 episodes of different lengths, append a 'tool result'."""
    contexts = [[1, 17, 23, 99] * n for n in (3, 7, 5)]
    outputs = []
    for step in range(3):
        completions = engine.generate(contexts, sampling, sessions=sessions)
        outputs.append([(c.token_ids, c.logprobs) for c in completions])
        for i, c in enumerate(completions):
            contexts[i] = contexts[i] + c.token_ids + [40 + step, 41, 42 + i][: 1 + (step + i) % 3]
    return outputs


@pytest.mark.parametrize("greedy", [True, False])
def test_session_reuse_matches_full_reencoding(engine, greedy):
    sampling = SamplingParams(greedy=greedy, temperature=1.0, max_new_tokens=6, seed=3)
    plain = _conversation(engine, None, sampling)
    engine.prefill_tokens = 0
    reused = _conversation(engine, ["a", "b", "c"], sampling)
    for step_plain, step_reused in zip(plain, reused, strict=True):
        for (ids_a, lp_a), (ids_b, lp_b) in zip(step_plain, step_reused, strict=True):
            assert ids_a == ids_b
            assert lp_a == pytest.approx(lp_b, abs=1e-4)
    engine.end_sessions(["a", "b", "c"])
    assert len(engine.sessions) == 0


def test_reuse_prefills_each_token_about_once(engine):
    sampling = SamplingParams(greedy=True, max_new_tokens=6)
    engine.prefill_tokens = 0
    _conversation(engine, None, sampling)
    without = engine.prefill_tokens
    engine.prefill_tokens = 0
    _conversation(engine, ["x", "y", "z"], sampling)
    with_reuse = engine.prefill_tokens
    engine.end_sessions(["x", "y", "z"])
    assert with_reuse < without / 2


def test_a_prompt_that_does_not_extend_the_session_is_encoded_whole(engine):
    sampling = SamplingParams(greedy=True, max_new_tokens=4)
    first = engine.generate([[5, 6, 7, 8]], sampling, sessions=["s"])[0]
    fresh = engine.generate([[9, 9, 9]], sampling)[0]
    other = engine.generate([[9, 9, 9]], sampling, sessions=["s"])[0]  # diverges from the cache
    assert other.token_ids == fresh.token_ids and first.token_ids
    engine.end_sessions(["s"])


@pytest.mark.parametrize("greedy", [True, False])
def test_a_repeated_prompt_is_prefilled_once_with_the_same_results(engine, greedy):
    group, other = [1, 17, 23, 99] * 6, [5, 6, 7, 8, 9]
    prompts = [group] * 4 + [other]
    sampling = SamplingParams(greedy=greedy, temperature=1.0, max_new_tokens=6, seed=11)
    engine.prefill_tokens = 0
    together = engine.generate(prompts, sampling)
    assert engine.prefill_tokens == (len(group) - 1) + 4 + len(other)
    if not greedy:  # the K samples of the group still differ from each other
        assert len({tuple(c.token_ids) for c in together[:4]}) > 1
        return
    for shared, prompt in zip(together, prompts, strict=True):
        alone = engine.generate([prompt], sampling)[0]  # a batch of one: nothing to share
        assert shared.token_ids == alone.token_ids
        assert shared.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
