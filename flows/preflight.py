"""What a run would fail on in its first minute, checked by `coevolve run CONFIG --dry-run` before it starts.

Two outcomes, kept apart so that a config written for another machine still dry-runs here:

- **refused** (`ConfigError`, one line naming the field): something present here but wrong, or a name this
  machine can never satisfy: a model directory that holds no model (`model.name=/etc`), a device index
  this machine does not have (`model.device=cuda:7`), a hub model that is not cached while
  `HF_HUB_OFFLINE` forbids the download, an accelerate config that is not there, a storage root that cannot
  be written.
- **warned** (a line the dry run prints; it still passes): something not here that a run on the machine
  it is meant for would have: a hub model not in this machine's cache (the run downloads it), CUDA on a
  machine without a GPU, a loopback server (policy, teacher) that is not up yet.

    warnings = preflight(config, root)   # ConfigError for what is refused
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from coevolve.config import CoevolveConfig, ConfigError

WEIGHTS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.gguf")
"""Files one of which a model directory must hold."""
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
OFFLINE = ("1", "true", "yes", "on")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def preflight(config: CoevolveConfig, root: Path | None = None) -> list[str]:
    """Warnings for what is not here but a run elsewhere would have; `ConfigError` for what is refused."""
    warnings = check_weights("model.name", config.model.name)
    warnings += check_device("model.device", config.model.device)
    teacher = config.teacher
    if teacher.type == "local":
        warnings += check_weights("teacher.model", teacher.model)
        warnings += check_device("teacher.device", teacher.device)
    if teacher.type == "openai":
        if teacher.tokenizer is not None:
            warnings += check_weights("teacher.tokenizer", teacher.tokenizer, tokenizer_only=True)
        warnings += check_server("teacher.base_url", teacher.base_url)
    for i, url in enumerate(config.model.servers):
        warnings += check_server(f"model.servers[{i}]", url)
    if config.train.accelerate_config:
        check_launcher(config.train.accelerate_config)
    if root is not None:
        check_writable(root)
    return warnings


def check_launcher(name: str) -> None:
    """The accelerate config of a launched update is a file, here or among the packaged configs."""
    from coevolve.config import find_config

    try:
        find_config(name)
    except ConfigError:
        raise ConfigError(f"train.accelerate_config: no accelerate config file at {name!r} (here or among the "
                          f"packaged configs/accelerate/)") from None  # fmt: skip


def check_weights(field: str, name: str, *, tokenizer_only: bool = False) -> list[str]:
    """A local directory must be a model (config.json and weights); a hub id must be cached or fetchable."""
    from coevolve.llm.models import WARM_STARTS, builtin_models

    if name in builtin_models() or name.startswith(f"{WARM_STARTS}/"):  # built here, by this or the warm start
        return []
    local = Path(name).expanduser()
    if local.exists():
        _check_model_directory(field, name, local, tokenizer_only)
        return []
    if name.startswith(("/", ".", "~")) or name.count("/") != 1:
        raise ConfigError(f"{field}: {name!r} is neither a model directory nor a built-in model "
                          f"({', '.join(builtin_models())}) nor a hub id (org/name)")  # fmt: skip
    return _check_hub_model(field, name, tokenizer_only)


def _check_model_directory(field: str, name: str, local: Path, tokenizer_only: bool) -> None:
    if not local.is_dir():
        raise ConfigError(f"{field}: {name} is a file, not a model directory")
    needed = TOKENIZER if tokenizer_only else ("config.json",)
    if not any((local / file).is_file() for file in needed):
        raise ConfigError(f"{field}: {name} is a directory but not a {'tokenizer' if tokenizer_only else 'model'} "
                          f"(no {' or '.join(needed)})")  # fmt: skip
    if not tokenizer_only and not any(next(local.glob(pattern), None) for pattern in WEIGHTS):
        raise ConfigError(f"{field}: {name} holds a config.json but no weights (*.safetensors or *.bin)")


def _check_hub_model(field: str, name: str, tokenizer_only: bool) -> list[str]:
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.constants import HF_HUB_CACHE

    cached = try_to_load_from_cache(name, "tokenizer_config.json" if tokenizer_only else "config.json")
    if isinstance(cached, str):
        return []
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in OFFLINE:
        raise ConfigError(f"{field}: {name} is not in this machine's Hugging Face cache ({HF_HUB_CACHE}) and "
                          f"HF_HUB_OFFLINE is set, so a run here cannot download it")  # fmt: skip
    return [f"{field}: {name} is not in this machine's Hugging Face cache ({HF_HUB_CACHE}): a run downloads it "
            f"from the hub first (network needed)"]  # fmt: skip


def check_device(field: str, device: str) -> list[str]:
    """A device this machine cannot have is refused; CUDA on a machine without a GPU is a warning."""
    if device == "cpu":
        return []
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{field}: {device!r} is not a torch device (cpu, cuda, cuda:N, mps)") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
            raise ConfigError(f"{field}: {device} names CUDA device {parsed.index}, but this machine has "
                              f"{count}{shown}; use cuda or cuda:0..{count - 1}" if count else
                              f"{field}: {device} names CUDA device {parsed.index}, but this machine has no CUDA "
                              f"device")  # fmt: skip
        if count == 0:
            return [f"{field}: {device}, and this machine has no CUDA device: the run needs a GPU machine"]
        return []
    backend = getattr(torch.backends, parsed.type, None) or getattr(torch, parsed.type, None)
    available = getattr(backend, "is_available", None)
    if available is not None and not available():
        return [f"{field}: {device} is not available on this machine: the run needs one that has it"]
    return []


def check_server(field: str, url: str) -> list[str]:
    """A loopback server the run asks in its first minutes that does not answer here (never via a proxy)."""
    host = urlparse(url).hostname
    if host not in LOOPBACK:
        return []  # another machine's server: reachable from where the run runs, not necessarily from here
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(f"{url.rstrip('/')}/models", timeout=1.0).close()
    except OSError as exc:
        if getattr(exc, "code", None) is not None:  # it answered (401 without a key, 404 off /v1): it is up
            return []
        return [f"{field}: {url} does not answer here ({getattr(exc, 'reason', exc)}): start it before the run"]
    return []


def check_writable(root: Path) -> None:
    """The storage root, or the nearest folder above it that exists, can be written."""
    existing = root.expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"storage root {root}: {existing} is a file, not a folder (--root, COEVOLVE_HOME or "
                          f"storage.root)")  # fmt: skip
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"storage root {root}: {existing} is not writable (--root, COEVOLVE_HOME or storage.root)")
