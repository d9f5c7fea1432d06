"""A policy served by OpenAI-compatible servers: several servers, failover, LoRA hot-loading, versions.

Runs against `tests.fakes.openai_server.FakeOpenAIServer`, which answers vLLM's endpoints (completions
with token ids and log-probs, /models, load/unload_lora_adapter) and samples nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coevolve.llm.engine import SamplingParams
from coevolve.llm.openai_engine import OpenAIEngine, OpenAIEngineError
from coevolve.stages.rollout import check_single_version
from tests.fakes.openai_server import FakeOpenAIServer

SAMPLING = SamplingParams(max_new_tokens=8, seed=0)


def completions(server: FakeOpenAIServer) -> list[dict]:
    return [r["body"] for r in server.requests if r["path"] == "/v1/completions"]


def adapter_dir(tmp_path, name: str):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "adapter_config.json").write_text("{}")
    return directory


def test_prompts_are_spread_over_the_servers_and_come_back_in_order():
    with FakeOpenAIServer(completion_ids=[5, 2]) as a, FakeOpenAIServer(completion_ids=[7, 2]) as b:
        engine = OpenAIEngine([a.base_url, b.base_url], "base", max_concurrency=4, version="v0")
        done = []
        out = engine.generate([[1, i] for i in range(6)], SAMPLING, progress=done.append)
        assert len(completions(a)) == len(completions(b)) == 3
        assert sorted(tuple(b["prompt"]) for b in completions(a) + completions(b)) == [(1, i) for i in range(6)]
        # each completion answers its own prompt: the server that got prompt i produced out[i]
        for i, completion in enumerate(out):
            server_ids = [5, 2] if [1, i] in [b["prompt"] for b in completions(a)] else [7, 2]
            assert completion.token_ids == server_ids and completion.version == "v0"
        assert sum(done) == 6


def test_a_failing_server_is_set_aside_and_the_request_goes_elsewhere():
    with FakeOpenAIServer(completion_ids=[7, 2]) as alive:
        dead = FakeOpenAIServer()
        dead_url = dead.base_url
        dead._server.server_close()  # never started: connections are refused
        engine = OpenAIEngine([dead_url, alive.base_url], "base", backoff_s=0.0, max_concurrency=2)
        out = engine.generate([[1, 2], [1, 3], [1, 4]], SAMPLING)
        assert [c.token_ids for c in out] == [[7, 2]] * 3
        assert engine.healthy == [False, True]
        engine.check_health()  # the dead one is probed again and stays aside
        assert engine.healthy == [False, True]
    with pytest.raises(OpenAIEngineError, match="failed after"):  # now both are down
        engine.generate([[1, 2]], SAMPLING)
    assert engine.healthy == [False, False]
    with pytest.raises(OpenAIEngineError, match="no inference server answers"):
        engine.check_health()


def test_update_weights_hot_loads_the_adapter_on_every_server_and_drops_the_old_one(tmp_path):
    with FakeOpenAIServer(served_model="base") as a, FakeOpenAIServer(served_model="base") as b:
        engine = OpenAIEngine([a.base_url, b.base_url], "base", version="base-1")
        assert engine.generate([[1, 2]], SAMPLING)[0].version == "base-1"

        engine.update_weights(adapter_dir(tmp_path, "round=0"))
        engine.version = "r0"
        first = engine.model
        assert a.adapters == b.adapters == {first: str((tmp_path / "round=0").resolve())}
        out = engine.generate([[1, 2], [1, 3]], SAMPLING)
        assert {c.version for c in out} == {"r0"}
        assert {body["model"] for body in completions(a)[1:] + completions(b)} == {first}

        engine.update_weights(adapter_dir(tmp_path, "round=1"))
        assert list(a.adapters) == list(b.adapters) == [engine.model] and engine.model != first

        engine.use_base()
        assert a.adapters == b.adapters == {} and engine.model == "base"
        engine.generate([[1, 2]], SAMPLING)  # the base is still served


def test_update_weights_refuses_a_full_checkpoint(tmp_path):
    with FakeOpenAIServer(served_model="base") as server:
        engine = OpenAIEngine(server.base_url, "base")
        (tmp_path / "model.safetensors").write_bytes(b"")
        with pytest.raises(OpenAIEngineError, match="lora_rank"):
            engine.update_weights(tmp_path)
        assert server.adapters == {}


def test_an_unknown_adapter_fails_with_the_servers_message(tmp_path):
    with FakeOpenAIServer(served_model="base") as server:
        engine = OpenAIEngine(server.base_url, "base")
        engine.model = "never-loaded"
        with pytest.raises(OpenAIEngineError, match="does not exist"):
            engine.generate([[1, 2]], SAMPLING)


def test_rollout_refuses_samples_of_another_policy_version():
    episodes = [SimpleNamespace(versions={"r1"}), SimpleNamespace(versions=set())]
    check_single_version(episodes, "r1", round_=2)
    with pytest.raises(RuntimeError, match=r"policy versions \['r0', 'r1'\]"):
        check_single_version([*episodes, SimpleNamespace(versions={"r0"})], "r1", round_=2)


def test_servers_need_a_lora_policy():
    from coevolve.config import ConfigError, load_config
    from tests.conftest import CONFIGS

    with pytest.raises(ConfigError, match="lora_rank"):
        load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[http://127.0.0.1:9/v1]"])
    config = load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[http://127.0.0.1:9/v1]", "train.lora_rank=4"])
    assert config.model.servers == ["http://127.0.0.1:9/v1"]


def test_engine_serve_command_follows_the_config():
    from coevolve.config import load_config
    from coevolve.llm.vllm_server import serve_command
    from tests.conftest import CONFIGS

    argv, env = serve_command(load_config(CONFIGS / "bfcl-qwen3-4b.yaml"), vllm="/opt/vllm")
    assert argv[:3] == ["/opt/vllm", "serve", "Qwen/Qwen3-4B"] and env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    flags = dict(zip(argv[3::1], argv[4::1], strict=False))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8000" and flags["--max-lora-rank"] == "64"
    assert "--enable-lora" in argv
    with pytest.raises(ValueError, match="model.servers is empty"):
        serve_command(load_config(CONFIGS / "test-tiny.yaml"))
    bad = load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[localhost:8000]", "train.lora_rank=4"])
    with pytest.raises(ValueError, match="needs a scheme, host and port"):
        serve_command(bad)


def test_engine_serve_cli_dry_run_and_missing_vllm(tmp_path):
    from typer.testing import CliRunner

    from coevolve.flows.cli import app
    from tests.conftest import CONFIGS

    runner = CliRunner()
    out = runner.invoke(app, ["engine", "serve", str(CONFIGS / "bfcl-qwen3-4b.yaml"), "--dry-run"])
    assert out.exit_code == 0 and "vllm serve Qwen/Qwen3-4B" in out.output
    missing = runner.invoke(app, ["engine", "serve", str(CONFIGS / "bfcl-qwen3-4b.yaml"),
                                  "--vllm", str(tmp_path / "nope")])  # fmt: skip
    assert missing.exit_code == 2 and "make gpu-env" in missing.output
