"""The served path for real: `coevolve engine serve` starts vLLM (the CPU build from `make vllm-env`) and a
two-round run generates through it, LoRA adapters hot-loaded or full weights reloaded after every update.

Each test starts one server through the real command, in its own process group, and stops it with
SIGTERM; afterwards no process of the server's group is left. SmolLM2-135M is the model: the tiny random
models' attention heads (16 wide) are narrower than any vLLM CPU attention kernel takes. Besides the
run's own rows, each test checks what makes served RL correct: the log-probs the server reported for
every sampled token equal the trainer's recomputation under the version that sampled it, and a weight
update that changes the outputs (a random adapter, perturbed weights) is served exactly.

Skipped without `.venv-vllm`; marked `slow` and `vllm`, so `pytest -m "not slow"` stays fast.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import REPO, Spawned, free_port, venv_bin, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

MODEL = "smollm2-135m"


@pytest.fixture(scope="module", autouse=True)
def vllm_venv() -> Path:
    from coevolve.llm.vllm_server import find_venv

    try:
        return find_venv(REPO / ".venv-vllm")
    except FileNotFoundError:
        pytest.skip("no vLLM venv at .venv-vllm: build it with `make vllm-env` to run the real-server tests")


@pytest.fixture(autouse=True)
def one_thread():
    """The trainer's side in one thread: the server's engine holds a core, and two OpenMP threads on a
    shared core wait for each other far longer than one thread computes."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_config(tmp_path: Path, url: str, name: str, **sections: dict) -> Path:
    config = {
        "run": {"name": name, "seed": 0, "rounds": 2},
        "model": {"name": MODEL, "servers": [url]},
        "env": {"name": "toolworld", "options": {"seed": 0, "n_train": 40, "n_test": 8, "n_heldout": 8}},
        "dataset": {"seed_split": "train"},
        "rollout": {"tasks_per_round": 2, "k": 4, "temperature": 1.0, "max_new_tokens": 16, "max_replies": 2,
                    "max_context_tokens": 1536},
        "train": {"lr": 1e-3, "beta": 0.0, "micro_batch_size": 4},
        "eval": {"every": 1, "splits": ["test"], "max_tasks": 2},
        "evolve": {"every": 0},
    }  # fmt: skip
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Server:
    """`coevolve engine serve CONFIG` as the test's child, in its own process group."""

    def __init__(self, config: Path, url: str, log: Path) -> None:
        self.url, self.cli = url, Spawned.start([venv_bin("coevolve"), "engine", "serve", str(config)], log,
                                                dict(os.environ))  # fmt: skip
        self.vllm_pid: int | None = None

    def __enter__(self) -> Server:
        wait_until(self._answers, 900, "vLLM server", watch=self.cli, every=1.0)
        self.vllm_pid = next(pid for pid in _children(self.cli.proc.pid))
        return self

    def _answers(self) -> bool:
        try:
            return httpx.get(self.url + "/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def __exit__(self, *exc: object) -> None:
        self.cli.kill(signal.SIGTERM, timeout=120)  # the command stops the server's group, then exits
        if self.vllm_pid is not None:
            with pytest.raises(ProcessLookupError):
                os.killpg(self.vllm_pid, 0)  # nothing of the server's group is left

    def root(self, path: str) -> str:
        return self.url.removesuffix("/v1") + "/" + path


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def trainer_logprob_gaps(model, rows: list[dict], temperature: float):
    """|server log-prob - trainer log-prob| over the policy tokens of sample rows."""
    import torch

    from coevolve.rl.logprobs import token_logprobs

    gaps = []
    for row in rows:
        ids = torch.tensor([row["input_ids"]])
        mask = torch.tensor([row["loss_mask"]]).bool()
        with torch.no_grad():
            ours = token_logprobs(model, ids, torch.ones_like(ids), temperature=temperature, score_mask=mask)
        gaps.append((ours[mask] - torch.tensor([row["logprobs"]])[mask]).abs())
    return torch.cat(gaps)


def assert_served_equals_trained(model, engine, prompts: list[list[int]]) -> None:
    """Sample from the servers and compare every token's log-prob with `model` (the trainer's copy)."""
    from coevolve.llm.engine import SamplingParams

    out = engine.generate(prompts, SamplingParams(temperature=0.8, max_new_tokens=16, seed=3))
    rows = [{"input_ids": p + c.token_ids, "loss_mask": [0] * len(p) + [1] * len(c.token_ids),
             "logprobs": [0.0] * len(p) + c.logprobs} for p, c in zip(prompts, out, strict=True)]  # fmt: skip
    gaps = trainer_logprob_gaps(model, rows, 0.8)
    assert float(gaps.mean()) < 1e-4 and float(gaps.max()) < 1e-2, (float(gaps.mean()), float(gaps.max()))


def check_run(root: Path, run: str, result: dict, load_policy) -> list[dict]:
    """Versions as the flow must record them, and sampler log-probs equal to the trainer's under the
    version that sampled them; returns the updates rows."""
    from coevolve.storage.catalog import query
    from coevolve.storage.layout import RunLayout

    assert len(result["rounds"]) == 2 and all(set(r.values()) == {"computed"} for r in result["rounds"])
    updates = query(root, f"SELECT round, policy_version, checkpoint FROM updates WHERE run = '{run}' "
                          "ORDER BY round").to_pylist()  # fmt: skip
    samples = query(root, f"SELECT round, policy_version, input_ids, loss_mask, logprobs FROM samples "
                          f"WHERE run = '{run}' ORDER BY round, sample_id").to_pylist()  # fmt: skip
    by_round = {r: {s["policy_version"] for s in samples if s["round"] == r} for r in (0, 1)}
    assert by_round[0] == {next(iter(by_round[0]))} and next(iter(by_round[0])).startswith("base-")
    assert by_round[1] == {updates[0]["policy_version"]}  # round 1 sampled exactly round 0's update
    sampled_by_r0 = [s for s in samples if s["round"] == 1]
    policy = load_policy(RunLayout(root, run).checkpoint_at(updates[0]["checkpoint"]))
    gaps = trainer_logprob_gaps(policy, sampled_by_r0, 1.0)
    assert float(gaps.mean()) < 1e-4 and float(gaps.max()) < 1e-2, (float(gaps.mean()), float(gaps.max()))
    return updates


def test_lora_run_with_a_served_teacher(tmp_path, monkeypatch, prefect_api):
    """LoRA adapters hot-loaded after each update; the teacher (bootstrap exploration in round 0) is the
    same server through the OpenAI engine; the server renders chat requests with the training prompt."""
    from peft import PeftModel

    from coevolve.flows.coevolve import coevolve
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.models import load_model
    from coevolve.storage.catalog import query

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "runs"))
    url = f"http://127.0.0.1:{free_port()}/v1"
    teacher = {"type": "openai", "base_url": url, "model": MODEL, "token_ids": True, "max_new_tokens": 32,
               "step_max_new_tokens": 16, "max_context_tokens": 1536}  # fmt: skip
    config = run_config(tmp_path, url, "vllm-lora", train={"lora_rank": 8}, teacher=teacher,
                        dataset={"bootstrap_tasks": 1, "bootstrap_worlds": 1},
                        explore={"rounds": 1, "steps": 2, "follow_ups": 0})  # fmt: skip
    with Server(config, url, tmp_path / "server.log") as server:
        result = coevolve(str(config), run="vllm-lora", rounds=2)
        served = [m["id"] for m in httpx.get(url + "/models", timeout=10).json()["data"]]

        base, tokenizer = load_model(MODEL)
        chat = ChatFormat(tokenizer)
        tools = [{"type": "function", "function": {"name": "get_balance", "description": "Balance of an account.",
                  "parameters": {"type": "object", "properties": {"account": {"type": "string"}}}}}]  # fmt: skip
        messages = [{"role": "user", "content": "What is on account A1?"}]
        rendered = httpx.post(server.root("tokenize"), timeout=60, json={
            "model": MODEL, "messages": messages, "tools": tools, "add_generation_prompt": True,
            "add_special_tokens": False}).json()["tokens"]
        assert rendered == chat.prompt_ids(messages, tools=tools)  # the server's chat template is training's

        updates = check_run(tmp_path / "runs", "vllm-lora", result,
                            lambda checkpoint: PeftModel.from_pretrained(load_model(MODEL)[0], checkpoint))
        assert len(served) == 2 and MODEL in served and any(m.startswith("policy-") for m in served)  # one live
        explored = query(tmp_path / "runs", "SELECT count(*) AS n FROM trajectories WHERE source = 'explore'")
        assert explored.to_pylist()[0]["n"] >= 1  # the teacher explored through the server

        from coevolve.llm.openai_engine import OpenAIEngine

        adapter = random_adapter(base, tmp_path / "adapter")
        engine = OpenAIEngine(url, MODEL, tokenizer=tokenizer, version="probe")
        engine.update_weights(adapter, version="random-adapter")
        prompts = [chat.prompt_ids([{"role": "user", "content": f"Count to {n}."}], tools=[]) for n in range(4)]
        assert_served_equals_trained(PeftModel.from_pretrained(load_model(MODEL)[0], adapter), engine, prompts)
    assert len(updates) == 2


def random_adapter(model, directory: Path) -> Path:
    """A LoRA adapter whose B matrices are random (a fresh adapter changes nothing), saved to `directory`."""
    import torch
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, target_modules="all-linear",
                                                  task_type="CAUSAL_LM"))  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.01)
    peft_model.save_pretrained(directory)
    return directory


def test_full_weight_run(tmp_path, monkeypatch, prefect_api):
    """`train.lora_rank: 0`: each update's checkpoint is reloaded in place through the worker extension;
    the server's weight label names the last update."""
    import torch

    from coevolve.flows.coevolve import coevolve
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.models import load_model
    from coevolve.llm.openai_engine import OpenAIEngine
    from coevolve.rl.checkpoint import save_checkpoint

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "runs"))
    url = f"http://127.0.0.1:{free_port()}/v1"
    config = run_config(tmp_path, url, "vllm-full", train={"lora_rank": 0, "lr": 1e-5})
    with Server(config, url, tmp_path / "server.log") as server:
        result = coevolve(str(config), run="vllm-full", rounds=2)
        label = httpx.get(server.root("weight_info"), timeout=10).json()["weight_version"]
        updates = check_run(tmp_path / "runs", "vllm-full", result, lambda checkpoint: load_model(str(checkpoint))[0])
        assert label == updates[1]["policy_version"]

        model, tokenizer = load_model(MODEL)  # perturbed weights: a reload that missed a tensor would show
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=generator) * 0.05 * param.std())
        save_checkpoint(model, tokenizer, None, tmp_path / "perturbed")
        engine = OpenAIEngine(url, MODEL, tokenizer=tokenizer, version="probe")
        engine.update_weights(tmp_path / "perturbed", version="perturbed")
        chat = ChatFormat(tokenizer)
        prompts = [chat.prompt_ids([{"role": "user", "content": f"Count to {n}."}], tools=[]) for n in range(4)]
        assert_served_equals_trained(model, engine, prompts)
