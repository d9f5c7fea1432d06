"""CUDA paths (marked `gpu`, skipped without a CUDA device): generation, the shared-prefix log-probs and
one GRPO update on the GPU in bf16, against the same computation on CPU in fp32."""

from __future__ import annotations

import pytest
import torch

from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model
from coevolve.rl.batch import SampleBatch
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer, micro_batch_logprobs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _batch(tokenizer) -> SampleBatch:
    prompt = tokenizer("<|im_start|>user\nWhat is the balance of CHK-7?<|im_end|>\n", add_special_tokens=False)
    ids = prompt["input_ids"]
    rows = [ids + [100 + i, 200 + i, 300 + i, 2] for i in range(4)]
    masks = [[0] * len(ids) + [1, 1, 1, 1] for _ in rows]
    return SampleBatch(input_ids=rows, loss_mask=masks, rewards=[1.0, 0.0, 0.5, 0.0], group_ids=[0] * 4)


def test_cuda_generation_matches_its_logprobs():
    model, tokenizer = load_model("tiny-random-llama", dtype="bfloat16", device="cuda")
    engine = HfEngine(model, tokenizer, batch_size=8)
    prompt = tokenizer("<|im_start|>user\nhi<|im_end|>\n", add_special_tokens=False)["input_ids"]
    out = engine.generate([prompt] * 3, SamplingParams(greedy=True, max_new_tokens=8))
    assert len({tuple(c.token_ids) for c in out}) == 1  # greedy: the same reply for the same prompt
    assert all(len(c.token_ids) == len(c.logprobs) and all(lp <= 0 for lp in c.logprobs) for c in out)


def test_cuda_logprobs_agree_with_cpu():
    gpu, tokenizer = load_model("tiny-random-llama", dtype="float32", device="cuda")
    cpu, _ = load_model("tiny-random-llama", dtype="float32")
    batch = _batch(tokenizer)
    for shared in (False, True):
        on_gpu = micro_batch_logprobs(gpu, batch, [0, 1, 2, 3], temperature=1.0, shared_prefix=shared).cpu()
        on_cpu = micro_batch_logprobs(cpu, batch, [0, 1, 2, 3], temperature=1.0, shared_prefix=shared)
        torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-3, atol=1e-3)


def test_cuda_bf16_update_changes_the_weights():
    model, tokenizer = load_model("tiny-random-llama", dtype="bfloat16", device="cuda")
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    hp = UpdateHyperparams(lr=1e-3, micro_batch_size=4)
    result = grpo_update(model, None, make_optimizer(model, hp.lr), _batch(tokenizer), hp)
    assert result.optimizer_steps == 1 and result.grad_norm > 0
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())
