"""The real flow with the policy behind inference servers: rollouts and evaluation go over HTTP, every
update's LoRA adapter is hot-loaded on every server, and round r+1 samples from that adapter.

The servers are `FakeOpenAIServer`s (they sample nothing: every reply is the same short completion);
the trainer is the tiny random model with a LoRA adapter, on CPU.
"""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = pytest.mark.slow


def test_two_rounds_through_two_servers(tmp_path, monkeypatch, prefect_api):
    from coevolve.flows.coevolve import coevolve
    from coevolve.storage.catalog import query

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    ids = [27, 42, 2]  # a few tokens, then <|im_end|>
    with FakeOpenAIServer(completion_ids=ids, served_model="tiny") as a, \
            FakeOpenAIServer(completion_ids=ids, served_model="tiny") as b:  # fmt: skip
        result = coevolve(str(CONFIGS / "test-tiny.yaml"), run="served", rounds=2, overrides=[
            f"model.servers=[{a.base_url}, {b.base_url}]", "model.served_name=tiny", "train.lora_rank=4"])
        requests = [r["body"] for server in (a, b) for r in server.requests if r["path"] == "/v1/completions"]
        loads = [r["body"] for r in a.requests if r["path"] == "/v1/load_lora_adapter"]
        assert [r["body"] for r in b.requests if r["path"] == "/v1/load_lora_adapter"] == loads
        live = dict(a.adapters)

    assert all(set(r.values()) == {"computed"} for r in result["rounds"])
    assert len(loads) == 2  # one adapter per update, each loaded on both servers
    assert loads[0]["lora_path"].endswith("checkpoints/round=0") and "round=1" in loads[1]["lora_path"]
    assert list(live) == [loads[1]["lora_name"]]  # the previous adapter was unloaded
    models = {body["model"] for body in requests}
    assert models == {"tiny", loads[0]["lora_name"], loads[1]["lora_name"]}  # base, after r0, after r1 (eval)
    assert all(body["return_tokens_as_token_ids"] and body["logprobs"] for body in requests)

    rows = query(tmp_path, "SELECT round, policy_version, count(*) AS n FROM trajectories "
                           "WHERE source = 'rollout' GROUP BY ALL ORDER BY round").to_pylist()  # fmt: skip
    versions = query(tmp_path, "SELECT round, policy_version FROM updates ORDER BY round").to_pylist()
    assert [r["n"] for r in rows] == [8, 8]
    assert rows[1]["policy_version"] == versions[0]["policy_version"]  # round 1 sampled round 0's update


def test_full_weight_sync_through_two_servers(tmp_path, monkeypatch, prefect_api):
    """`train.lora_rank: 0`: the servers first get the base weights (their label was not the base version),
    then each update's checkpoint, in place; requests always name the base model."""
    from coevolve.flows.coevolve import coevolve
    from coevolve.llm.models import resolve_model
    from coevolve.storage.catalog import query

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    ids = [27, 42, 2]
    with FakeOpenAIServer(completion_ids=ids, served_model="tiny", dev_endpoints=True) as a, \
            FakeOpenAIServer(completion_ids=ids, served_model="tiny", dev_endpoints=True) as b:  # fmt: skip
        coevolve(str(CONFIGS / "test-tiny.yaml"), run="served-full", rounds=2, overrides=[
            f"model.servers=[{a.base_url}, {b.base_url}]", "model.served_name=tiny", "train.lora_rank=0"])
        requests = [r["body"] for server in (a, b) for r in server.requests if r["path"] == "/v1/completions"]
        reloads, labels = (a.reloads, b.reloads), (a.weight_version, b.weight_version)

    versions = query(tmp_path, "SELECT round, policy_version FROM updates ORDER BY round").to_pylist()
    assert reloads[0] == reloads[1] and len(reloads[0]) == 3
    assert reloads[0][0] == str(resolve_model("tiny-random-llama").resolve())
    assert reloads[0][1].endswith("checkpoints/round=0") and reloads[0][2].endswith("checkpoints/round=1")
    assert labels == (versions[1]["policy_version"],) * 2
    assert {body["model"] for body in requests} == {"tiny"}
    rows = query(tmp_path, "SELECT round, list(DISTINCT policy_version) AS v FROM trajectories "
                           "WHERE source = 'rollout' GROUP BY ALL ORDER BY round").to_pylist()  # fmt: skip
    assert [r["v"] for r in rows] == [[rows[0]["v"][0]], [versions[0]["policy_version"]]]
