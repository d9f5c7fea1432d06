"""Start a vLLM OpenAI-compatible server for a config's policy (`coevolve engine serve CONFIG`).

vLLM cannot share the project's venv (its fastapi pin clashes with Prefect >= 3.7, docs/stack-notes), so
it runs from its own venv (`make gpu-env` creates `.venv-gpu`) as a separate process, and the rollout
stage talks to it through `llm.openai_engine.OpenAIEngine` (`model.servers`). The server:

- listens where the config's first `model.servers` URL says (loopback by default), and serves the base
  weights under `model.served_name` (default `model.name`);
- accepts LoRA adapters at run time (`--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) up to the
  config's `train.lora_rank`, so each update's adapter is hot-loaded (`OpenAIEngine.update_weights`);
- returns sampled tokens as `token_id:N` with their log-probs when a request asks (`--return-tokens-as-
  token-ids` is a per-request option our engine always sends).

    argv, env = serve_command(config)     # what would run; `coevolve engine serve --dry-run` prints it
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

from coevolve.config import CoevolveConfig

GPU_VENV = Path(".venv-gpu")
INSTALL_HINT = "make gpu-env  (a separate venv with vLLM; it cannot share the project's venv)"


def find_vllm(explicit: str | None = None) -> str:
    """The `vllm` executable: `explicit`, else `.venv-gpu/bin/vllm`, else one on PATH."""
    for candidate in (explicit, str(GPU_VENV / "bin" / "vllm"), shutil.which("vllm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(f"no vllm executable{f' at {explicit}' if explicit else ''}; install it with: {INSTALL_HINT}")


def serve_command(config: CoevolveConfig, *, vllm: str = "vllm", server: int = 0,
                  gpu_memory_utilization: float = 0.85) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """(argv, extra environment) that start the policy server number `server` of `model.servers`."""
    servers = config.model.servers
    if not servers:
        raise ValueError("model.servers is empty: list the URL the policy server should listen on, "
                         "e.g. model.servers=[http://127.0.0.1:8000/v1]")  # fmt: skip
    if not 0 <= server < len(servers):
        raise ValueError(f"--server {server}: the config lists {len(servers)} server(s)")
    url = urlparse(servers[server])
    if url.scheme not in ("http", "https") or not url.hostname or url.port is None:
        raise ValueError(f"model.servers[{server}]: {servers[server]!r} needs a scheme, host and port")
    from coevolve.llm.models import resolve_model

    model = config.model
    weights = str(resolve_model(model.name)) if model.name in _local_names() else model.name
    argv = [
        vllm, "serve", weights,
        "--served-model-name", model.served_name or model.name,
        "--host", url.hostname, "--port", str(url.port),
        "--dtype", model.dtype,
        "--enable-lora", "--max-lora-rank", str(max(config.train.lora_rank, 1)),
        "--max-model-len", str(max(config.rollout.max_context_tokens, config.rollout.max_new_tokens)),
        "--gpu-memory-utilization", str(gpu_memory_utilization),
        "--enable-prefix-caching",
    ]  # fmt: skip
    return argv, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def _local_names() -> tuple[str, ...]:
    from coevolve.llm.models import builtin_models

    return builtin_models()
