"""Start vLLM OpenAI-compatible servers for a config's policy and teacher (`coevolve engine serve CONFIG`).

vLLM cannot share the project's venv (its fastapi pin clashes with Prefect >= 3.7, docs/stack-notes), so
`make vllm-env` builds `.venv-vllm` (the CUDA build where a GPU is present, else the CPU build) and the
server runs there as a separate process; the flow talks to it through `llm.openai_engine.OpenAIEngine`
(`model.servers`, `teacher.type: openai`). The server runs `python -m coevolve_vllm serve` with
`llm/vllm_side/` on PYTHONPATH: the `vllm` command line that also works for the CPU build, and the worker
extension that loads a checkpoint's full weights in place (`llm.served_weights`). A policy server:

- binds 127.0.0.1 (`host` for another address) on the port of its `model.servers` URL, and serves the base
  weights under `model.served_name` (default `model.name`) with the trainer's chat template
  (`llm.chat_template`), log-probs `log_softmax(logits / T)` of the sampled tokens (as the trainer
  computes them), and enough context for the rollout's and the policy teacher's longest request;
- takes new weights after every update: a LoRA adapter hot-loaded at run time (`train.lora_rank > 0`:
  `--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING`) or the full checkpoint through the extension
  (`train.lora_rank: 0`: `VLLM_SERVER_DEV_MODE=1` exposes /pause, /collective_rpc, /resume; they call
  any worker method, so keep such a server on loopback);
- on the CPU build: float weights in the config's dtype, eager mode (no compile warm-up) and a KV cache
  of `kv_cache_gib` GiB (`VLLM_CPU_KVCACHE_SPACE`; without it vLLM reserves most of the RAM).

A teacher server (`teacher.type: openai`) serves `teacher.model` under that name with its own chat
template, at `teacher.base_url`. `run_server` keeps the server a child of the command, in its own
process group: SIGINT / SIGTERM go to the whole group, and if the command dies the server gets SIGTERM
(`coevolve.processes.die_with_parent`), so no engine process outlives it.

    spec = policy_spec(config)                      # what server 0 of model.servers serves
    argv, env = serve_command(spec, venv=find_venv())
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from coevolve.config import CoevolveConfig
from coevolve.loopback import http_client

VENV = ".venv-vllm"
SIDE = Path(__file__).resolve().parent / "vllm_side"
"""The folder put on the server's PYTHONPATH: the `coevolve_vllm` module, and nothing else."""
EXTENSION = "coevolve_vllm.WeightSyncExtension"
INSTALL_HINT = "make vllm-env  (a separate venv with vLLM; it cannot share the project's venv)"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ranks vLLM accepts for `--max-lora-rank`."""


@dataclass(frozen=True)
class ServerSpec:
    """What one server serves, and where."""

    url: str
    """Base URL clients use (with `/v1`); the server listens on its port."""
    weights: str
    """Local model directory or hub id."""
    served_name: str
    dtype: str
    max_model_len: int
    lora_rank: int = 0
    """> 0: accept LoRA adapters up to this rank at run time."""
    full_sync: bool = False
    """Accept full-weight updates through the worker extension (dev endpoints on)."""
    chat_template: Path | None = None
    """Jinja file of the chat template; None: the model's own."""


def policy_spec(config: CoevolveConfig, server: int = 0, *, write_template: bool = True) -> ServerSpec:
    """Server number `server` of `model.servers`. `write_template`: write the trainer's chat template file
    (needs the tokenizer); False only names it (a dry run)."""
    from coevolve.llm.models import resolve_model

    model = config.model
    url = _server_url(model.servers, server)
    weights = str(resolve_model(model.name)) if _local(model.name) else model.name
    template = chat_template_file(model.name)
    if write_template:
        write_chat_template(template, weights)
    lengths = [config.rollout.max_context_tokens + config.rollout.max_new_tokens]
    if config.teacher.type == "policy":  # the policy teacher's requests go to the same server
        lengths.append(config.teacher.max_context_tokens + config.teacher.max_new_tokens)
    return ServerSpec(url, weights, model.served_name or model.name, model.dtype, _fit(max(lengths), weights),
                      lora_rank=config.train.lora_rank, full_sync=not config.train.lora_rank,
                      chat_template=template)  # fmt: skip


def teacher_spec(config: CoevolveConfig, *, dtype: str | None = None) -> ServerSpec:
    """The server of an `openai` teacher, at `teacher.base_url`, serving `teacher.model`."""
    from coevolve.llm.models import resolve_model

    teacher = config.teacher
    if teacher.type != "openai":
        raise ValueError(f"teacher.type is {teacher.type!r}: only an `openai` teacher is served by a server")
    url = _server_url([teacher.base_url], 0, field="teacher.base_url")
    weights = str(resolve_model(teacher.model)) if _local(teacher.model) else teacher.model
    length = teacher.max_context_tokens + max(teacher.max_new_tokens, teacher.step_max_new_tokens)
    return ServerSpec(url, weights, teacher.model, dtype or config.model.dtype, _fit(length, weights))


def serve_command(spec: ServerSpec, *, venv: Path, host: str | None = None, kv_cache_gib: int = 2,
                  gpu_memory_utilization: float = 0.85) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """(argv, extra environment) that start `spec`'s server from the vLLM venv `venv`."""
    port = urlparse(spec.url).port
    argv = [str(Path(venv) / "bin" / "python"), "-m", "coevolve_vllm", "serve", spec.weights,
            "--served-model-name", spec.served_name, "--host", host or "127.0.0.1", "--port", str(port),
            "--dtype", spec.dtype, "--max-model-len", str(spec.max_model_len),
            "--logprobs-mode", "processed_logprobs", "--enable-prefix-caching"]  # fmt: skip
    env = {"PYTHONPATH": str(SIDE)}
    if spec.chat_template is not None:
        argv += ["--chat-template", str(spec.chat_template)]
    if spec.lora_rank:
        rank = next((r for r in LORA_RANKS if r >= spec.lora_rank), LORA_RANKS[-1])
        argv += ["--enable-lora", "--max-lora-rank", str(rank)]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if spec.full_sync:
        argv += ["--worker-extension-cls", EXTENSION]
        env["VLLM_SERVER_DEV_MODE"] = "1"
    if cpu_build(venv):
        # Eager: no compile warm-up at start. Whole prompts per step: a seeded request whose prompt is
        # split over steps makes the CPU build's sampler fail (it rewinds a CPU torch.Generator's offset,
        # which CPU generators do not have) and the engine die.
        argv += ["--enforce-eager", "--no-enable-chunked-prefill",
                 "--max-num-batched-tokens", str(max(spec.max_model_len, 2048))]  # fmt: skip
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    else:
        argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    return argv, env


def find_venv(explicit: str | Path | None = None) -> Path:
    """The vLLM venv: `explicit`, else `.venv-vllm` here or in the checkout this module belongs to."""
    repo = Path(__file__).resolve().parents[1]
    candidates = [Path(explicit)] if explicit else [Path.cwd() / VENV, repo / VENV]
    for venv in candidates:
        if (venv / "bin" / "python").is_file() and list(venv.glob("lib/python*/site-packages/vllm")):
            return venv
    where = f" at {explicit}" if explicit else f" ({VENV} here or in {repo})"
    raise FileNotFoundError(f"no vLLM venv{where}; build it with: {INSTALL_HINT}")


def cpu_build(venv: Path) -> bool:
    """Whether `venv` holds vLLM's CPU build (distribution `vllm-cpu`)."""
    return bool(list(Path(venv).glob("lib/python*/site-packages/vllm_cpu-*.dist-info")))


def chat_template_file(model: str) -> Path:
    """Where the trainer's chat template for `model` is written (the cache, next to converted models)."""
    from coevolve.llm.models import cache_dir

    return cache_dir() / "chat-templates" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", model) + ".jinja")


def write_chat_template(path: Path, weights: str) -> None:
    """Write the trainer's chat template for the tokenizer of `weights` to `path` (atomically)."""
    from transformers import AutoTokenizer

    from coevolve.llm.chat import ChatFormat

    text = ChatFormat(AutoTokenizer.from_pretrained(weights)).template()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


# -- processes ---------------------------------------------------------------------------------------


def start_server(argv: list[str], env: dict[str, str], *, log: Path | None = None) -> subprocess.Popen:
    """Start a server in its own process group, its output appended to `log` (None: this process's
    stdout and stderr); it gets SIGTERM if this process dies."""
    from coevolve.processes import die_with_parent

    out = open(log, "ab") if log is not None else None  # noqa: SIM115 - the child holds it
    try:
        return subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)  # fmt: skip
    finally:
        if log is not None:
            out.close()


def wait_until_ready(url: str, process: subprocess.Popen, *, timeout_s: float = 600.0) -> float:
    """Seconds until `GET <url>/models` answers with JSON (directly, whatever proxy the environment names,
    when the server is on loopback); raises if the server exits or the time runs out."""
    import httpx

    started = time.monotonic()
    with http_client(url, timeout=5) as client:
        while time.monotonic() - started < timeout_s:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with status {process.returncode} before answering")
            with contextlib.suppress(httpx.HTTPError, ValueError):  # not up yet, or not yet answering JSON
                reply = client.get(url.rstrip("/") + "/models")
                if reply.status_code == 200:
                    reply.json()
                    return time.monotonic() - started
            time.sleep(1.0)
    raise TimeoutError(f"no answer from {url} after {timeout_s:.0f} s")


def stop_server(process: subprocess.Popen, *, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's process group (vLLM then stops its engine processes), SIGKILL to whatever
    is left after `grace_s`. Killing only the parent would orphan the engine processes."""
    group = process.pid
    _signal_group(group, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    _signal_group(group, signal.SIGKILL)
    process.wait()


@contextmanager
def policy_server(config: CoevolveConfig, *, log: Path, venv: Path | None = None,
                  timeout_s: float = 900.0) -> Iterator[float]:  # fmt: skip
    """Server 0 of `config`'s `model.servers`, running for the duration of a `with` block (benchmarks,
    tests); yields the seconds it took to answer."""
    argv, env = serve_command(policy_spec(config), venv=find_venv(venv))
    process = start_server(argv, env, log=log)
    try:
        yield wait_until_ready(config.model.servers[0], process, timeout_s=timeout_s)
    finally:
        stop_server(process)


def run_server(argv: list[str], env: dict[str, str]) -> int:
    """Run a server in the foreground until it exits; SIGINT / SIGTERM stop its whole process group.
    Returns its exit status."""
    process = start_server(argv, env)

    def forward(signum: int, frame: object) -> None:  # only signal here: the main thread is in wait()
        _signal_group(process.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_server(process)  # whatever of its group is left


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


# -- config ------------------------------------------------------------------------------------------


def _server_url(urls: list[str], index: int, *, field: str = "model.servers") -> str:
    if not urls:
        raise ValueError(f"{field} is empty: list the URL the policy server should listen on, "
                         "e.g. model.servers=[http://127.0.0.1:8000/v1]")  # fmt: skip
    if not 0 <= index < len(urls):
        raise ValueError(f"--server {index}: the config lists {len(urls)} server(s)")
    url = urlparse(urls[index])
    if url.scheme not in ("http", "https") or not url.hostname or url.port is None:
        raise ValueError(f"{field}[{index}]: {urls[index]!r} needs a scheme, host and port")
    return urls[index]


def _local(name: str) -> bool:
    from coevolve.llm.models import builtin_models

    return name in builtin_models() or Path(name).expanduser().is_dir()


def _fit(length: int, weights: str) -> int:
    """`length`, at most the model's own context (`max_position_embeddings`) when its config is local."""
    config = Path(weights) / "config.json"
    if config.is_file():
        limit = json.loads(config.read_text()).get("max_position_embeddings")
        if isinstance(limit, int) and limit > 0:
            return min(length, limit)
    return length
