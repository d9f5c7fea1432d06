"""Full-weight sync of vLLM policy servers from a checkpoint directory (`train.lora_rank: 0` with servers).

vLLM's OpenAI API has no way to push a full checkpoint, and its weight-transfer endpoints need NCCL or
CUDA IPC (none on a CPU, none across a file system). A server started by `coevolve engine serve` for a
full-weight policy runs with the dev endpoints and the worker extension `coevolve_vllm` (llm/vllm_side),
and each server is synced in five requests:

1. `POST /pause?mode=wait`: new requests wait, in-flight ones finish (the flow never syncs mid-rollout);
2. `POST /collective_rpc {"method": "reload_from_dir", "args": [DIR]}`: every worker reads DIR's
   safetensors into its live parameters and rebuilds a tied output layer (see the extension);
3. `POST /reset_prefix_cache`: KV blocks computed with the old weights would otherwise be reused for
   prompts that share a prefix with earlier ones;
4. `POST /update_weight_version {"new_version": VERSION}`: the server's label of what it serves
   (`GET /weight_info`), so a new process, a resumed run, finds the weights already there;
5. `POST /resume` (always, also after a failed reload).

The directory must be readable by the servers (same machine or a shared file system).

    sync_full_weights(engine, checkpoint_dir, "r3-ab12cd34ef56")
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from coevolve.llm.engine import OpenAIEngineError

DEV_HINT = ("start it with `coevolve engine serve` for a config with train.lora_rank: 0 (worker extension "
            "coevolve_vllm, VLLM_SERVER_DEV_MODE=1)")  # fmt: skip


def is_full_checkpoint(directory: Path) -> bool:
    """A model directory in HF layout (config and safetensors), not a LoRA adapter."""
    directory = Path(directory)
    return (directory / "config.json").is_file() and any(directory.glob("*.safetensors")) and not (
        directory / "adapter_config.json"
    ).is_file()


def served_versions(engine: Any) -> list[str | None]:
    """Each server's weight label (`GET /weight_info`); None where the server has no such endpoint."""
    labels: list[str | None] = []
    for server in range(len(engine.urls)):
        status, data = _call(engine, server, "GET", "weight_info")
        labels.append(data.get("weight_version") if status == 200 and isinstance(data, dict) else None)
    return labels


def sync_full_weights(engine: Any, directory: Path, version: str, *, force: bool = False) -> dict[str, float]:
    """Load checkpoint `directory` on every server of `engine` that does not already serve `version`
    (`force`: on all); returns seconds per server URL (0 for one that already had it)."""
    path = str(Path(directory).resolve())
    labels = [None] * len(engine.urls) if force else served_versions(engine)
    seconds = {}
    for server, url in enumerate(engine.urls):
        if labels[server] == version:
            seconds[url] = 0.0
            continue
        started = time.perf_counter()
        _sync_one(engine, server, path, version)
        seconds[url] = time.perf_counter() - started
    return seconds


def _sync_one(engine: Any, server: int, path: str, version: str) -> None:
    _expect(engine, server, "POST", "pause?mode=wait")
    try:
        _expect(engine, server, "POST", "collective_rpc", {"method": "reload_from_dir", "args": [path]})
        _expect(engine, server, "POST", "reset_prefix_cache")
        _expect(engine, server, "POST", "update_weight_version", {"new_version": version})
    finally:
        _expect(engine, server, "POST", "resume")


def _expect(engine: Any, server: int, method: str, path: str, body: dict | None = None) -> Any:
    status, data = _call(engine, server, method, path, body)
    if status == 404:
        raise OpenAIEngineError(f"{engine.urls[server]}: no /{path.split('?')[0]} endpoint, so the server cannot "
                                f"take full weights; {DEV_HINT}")  # fmt: skip
    if status >= 400:
        raise OpenAIEngineError(f"{engine.urls[server]}: /{path}: HTTP {status}: {str(data)[:500]}")
    return data


def _call(engine: Any, server: int, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
    """(status, decoded JSON or text) of a request to the server's root (the dev endpoints are not under
    /v1). Reloading a big model takes a while: no timeout beyond the engine's, no retries."""
    client = engine._clients[server]
    url = engine.urls[server].removesuffix("/v1") + "/" + path
    response = client.request(method, url, json=body, timeout=max(client.timeout.read or 0, 600.0))
    try:
        return response.status_code, response.json()
    except (ValueError, RecursionError):  # RecursionError: brackets nested past the recursion limit
        return response.status_code, response.text
