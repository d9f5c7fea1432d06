"""Warm starts as LoRA adapters: trained small, merged into the checkpoint a run loads, shipped with the code.

A `WarmStart` with `lora_rank` > 0 trains an adapter on every linear layer instead of every weight. The
adapter is rounded to bfloat16 and written into the start's folder (`adapter/`, a few MB); the checkpoint
next to it is always the base merged with that written adapter, so merging a shipped copy of the adapter
gives the checkpoint its build gave.

Shipped starts: `configs/warm-starts/<name>/` (`<name>` the start's folder in the model cache, `<key>` or
`teacher-<key>`) holds the adapter and the build's record. `build_warm_starts` merges it, in seconds,
instead of training when the model cache lacks that start; `coevolve models warm-start CONFIG --rebuild
--ship` trains the config's starts again and writes them there.

    path = merge_adapter(base_dir, adapter_dir, target, record)   # the checkpoint, written atomically
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.rl.batch import SampleBatch
from coevolve.rl.warm_start import WarmStart, warm_start

ADAPTER = "adapter"
"""The adapter's folder inside a start built with LoRA (peft layout: adapter_config.json and
adapter_model.safetensors in bfloat16)."""
RECORD = "warm_start.json"
"""The build record of a start (settings, tasks, losses, seconds), also shipped with its adapter."""


def shipped_starts() -> Path:
    """The folder of the starts shipped with the package (in a checkout: `configs/warm-starts/`)."""
    from coevolve.config import packaged_configs

    return packaged_configs() / "warm-starts"


def shipped_adapter(name: str, shipped: Path | None = None) -> Path | None:
    """The shipped copy of the start named `name` (its folder in `shipped`, default `shipped_starts()`),
    or None when none is shipped."""
    folder = (shipped or shipped_starts()) / name
    complete = all((folder / f).is_file() for f in ("adapter_config.json", "adapter_model.safetensors", RECORD))
    return folder if complete else None


def staging(target: Path) -> Path:
    """An empty sibling folder of `target` to write a start into before it is moved into place."""
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def train_start(model: Any, samples: SampleBatch, settings: WarmStart, tmp: Path, *, base: str,
                progress: Callable[[int, int, float], None] | None = None) -> tuple[Any, list[float]]:  # fmt: skip
    """Fine-tune `model` (the model named `base`) on `samples` (`rl.warm_start`). With LoRA: train an
    adapter, write it rounded to bfloat16 to `tmp/adapter`, and return the base merged with what was
    written. The model and the losses of every step."""
    if not settings.lora_rank:
        return model, warm_start(model, samples, settings, progress=progress)
    from coevolve.rl.trainer import with_lora_adapter

    adapted = with_lora_adapter(model, settings.lora_rank, settings.lora_alpha)
    losses = warm_start(adapted, samples, settings, progress=progress)
    write_adapter(adapted, tmp / ADAPTER, base=base)
    return merged(adapted.unload(), tmp / ADAPTER), losses


def write_adapter(adapted: Any, folder: Path, *, base: str) -> None:
    """The trained adapter of a peft model, its weights in bfloat16, its base model named `base`."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config = adapted.peft_config["default"]
    config.base_model_name_or_path = base  # the name, not this machine's cache path
    config.save_pretrained(str(folder))
    state = get_peft_model_state_dict(adapted, save_embedding_layers=False)  # no hub lookup of the base
    save_file({k: v.detach().to(torch.bfloat16).contiguous() for k, v in state.items()},
              str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})  # fmt: skip


def merged(base: Any, adapter: Path) -> Any:
    """`base` (a plain model) with the adapter in `adapter` merged into its weights."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().eval()


def merge_adapter(base: str | Path, adapter: Path, target: Path, record: dict, *, dtype: str = "float32") -> Path:
    """Write to `target` the model `base` merged with the shipped `adapter`: weights, tokenizer, the adapter
    and `record` (the shipped build record) with the seconds the merge took (`merge_seconds`)."""
    from coevolve.llm.models import load_model

    started = time.perf_counter()
    model, tokenizer = load_model(str(base), dtype=dtype)
    tmp = staging(target)
    shutil.copytree(adapter, tmp / ADAPTER, ignore=shutil.ignore_patterns(RECORD))
    model = merged(model, tmp / ADAPTER)
    record = {**record, "merge_seconds": round(time.perf_counter() - started, 1)}
    return save_start(model, tokenizer, record, tmp, target)


def save_start(model: Any, tokenizer: Any, record: dict, tmp: Path, target: Path) -> Path:
    """Write weights, tokenizer and `RECORD` into `tmp` (from `staging`; it may hold the adapter already),
    then move it into place as `target`."""
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def ship(start: Path, shipped: Path | None = None) -> Path:
    """Copy a start built with LoRA (its adapter and record) into the shipped folder; the copy's path."""
    if not (start / ADAPTER / "adapter_model.safetensors").is_file():
        raise ValueError(f"{start} has no LoRA adapter to ship (built with warm_start.lora_rank: 0?)")
    folder = (shipped or shipped_starts()) / start.name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(start / ADAPTER, folder)
    shutil.copy2(start / RECORD, folder / RECORD)
    return folder
