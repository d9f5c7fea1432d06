"""The in-memory policy: LoRA option (adapter trained, base as reference), checkpoint reload."""

import pytest
import torch

from coevolve.agents.policy import Policy
from coevolve.config import ModelConfig, TrainConfig
from coevolve.llm.engine import SamplingParams
from coevolve.rl.batch import SampleBatch
from coevolve.rl.checkpoint import save_checkpoint
from coevolve.rl.update import UpdateHyperparams, grpo_update

pytest.importorskip("peft")


def lora_policy() -> Policy:
    policy = Policy(ModelConfig(name="tiny-random-llama"), TrainConfig(lr=1e-2, beta=0.05, lora_rank=4))
    policy.load_base()
    return policy


def test_lora_policy_trains_only_the_adapter_and_reloads_it(tmp_path):
    policy = lora_policy()
    assert hasattr(policy.model, "disable_adapter") and policy.reference_model() is None
    prompt = policy.chat.prompt_ids([{"role": "user", "content": "hello"}], tools=[])
    completions = policy.engine.generate([prompt] * 4, SamplingParams(max_new_tokens=6, seed=0))
    rows = [prompt + c.token_ids for c in completions]
    masks = [[0] * len(prompt) + [1] * len(c.token_ids) for c in completions]
    batch = SampleBatch(rows, masks, [1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0])
    before = {k: v.detach().clone() for k, v in policy.model.named_parameters()}
    hp = UpdateHyperparams(lr=1e-2, beta=0.05)
    grpo_update(policy.model, policy.reference_model(), policy.make_optimizer(), batch, hp)
    changed = {k for k, v in policy.model.named_parameters() if not torch.equal(before[k], v)}
    assert changed and all("lora_" in k for k in changed)

    save_checkpoint(policy.model, policy.tokenizer, policy.optimizer, tmp_path / "ckpt")
    fresh = lora_policy()
    fresh.ensure("r1-test", tmp_path / "ckpt")
    trained = dict(policy.model.named_parameters())
    for name, value in fresh.model.named_parameters():
        assert torch.equal(value, trained[name]), name
    assert fresh.engine.version == "r1-test"
