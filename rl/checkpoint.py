"""Policy checkpoints in Hugging Face `save_pretrained` layout, written atomically.

Layout of a checkpoint directory:

    config.json, model.safetensors (or adapter_config.json + adapter_model.safetensors for peft),
    tokenizer files (with the chat template training used: `save_tokenizer`), optimizer.pt (optional),
    coevolve_checkpoint.json (completion marker, last)

Everything is written into ``<name>.tmp-<pid>`` next to the target, every file and the directory
fsynced, and renamed into place, so a reader never sees a half-written checkpoint under its final name
and a power loss cannot leave a renamed but empty one. An existing checkpoint of the same name is first
renamed aside and deleted only after the new one is in place. Leftovers of a writer killed half-way
(``*.tmp-<pid>``, ``*.old-<pid>``) are removed by `remove_leftovers` before the next write.
A file that does not load (truncated, edited) raises `CorruptCheckpointError` naming it.

`load_weights` loads a checkpoint's weights into a model of the same architecture (the whole model, or
a peft adapter's weights into a model carrying that adapter). The `grpo_update` stage writes one
checkpoint per round; the policy (`agents.policy`) and launched updates load them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

MARKER = "coevolve_checkpoint.json"
OPTIMIZER_FILE = "optimizer.pt"


def _is_peft(model: nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that does not load; the message names it."""


def _fsync_tree(directory: Path) -> None:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_dir(tmp: Path, directory: Path) -> None:
    """Move ``tmp`` to ``directory``, replacing an existing directory without a half-state."""
    if directory.exists():
        old = directory.with_name(f"{directory.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old)
    else:
        os.replace(tmp, directory)
    _fsync_dir(directory.parent)


def remove_leftovers(parent: Path) -> list[Path]:
    """Delete what killed writers left in a checkpoints folder (``*.tmp-<pid>``, ``*.old-<pid>``); call it
    only while no other process writes there (the run's lock). Returns what was removed."""
    stale = [p for p in Path(parent).glob("*") if p.is_dir() and (".tmp-" in p.name or ".old-" in p.name)]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def save_checkpoint(
    model: nn.Module,
    tokenizer: Any | None,
    optimizer: torch.optim.Optimizer | None,
    directory: Path,
    *,
    state: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> None:
    """Save ``model`` (adapters only if it is a peft model), ``tokenizer`` and optimizer state.
    ``state``: the model's and optimizer's state dicts gathered already (a sharded model,
    `rl.sharding.full_state`), written instead of the live ones."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.with_name(f"{directory.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        model.save_pretrained(tmp, **({} if state is None else {"state_dict": state[0]}))
        if tokenizer is not None:
            save_tokenizer(tokenizer, tmp)
        if optimizer is not None:
            torch.save(optimizer.state_dict() if state is None else state[1], tmp / OPTIMIZER_FILE)
        marker = {"kind": "adapter" if _is_peft(model) else "full", "optimizer": optimizer is not None}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _fsync_tree(tmp)
        _replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_tokenizer(tokenizer: Any, directory: Path) -> None:
    """Save `tokenizer` with the chat template of the prompts the policy is trained on (`llm.chat`: tool
    signatures in the system message), so that serving or loading the checkpoint elsewhere and rendering
    with `apply_chat_template(..., tools=...)` gives the training prompt. A tokenizer that is not ChatML
    keeps its own template. The tokenizer object itself is left as it was."""
    from coevolve.llm.chat import ChatFormat

    try:
        template = ChatFormat(tokenizer).template()
    except ValueError:  # not a ChatML model: the project's format does not apply
        tokenizer.save_pretrained(directory)
        return
    original = tokenizer.chat_template
    tokenizer.chat_template = template
    try:
        tokenizer.save_pretrained(directory)
    finally:
        tokenizer.chat_template = original


def _read_marker(directory: Path) -> dict:
    directory = Path(directory)
    marker = directory / MARKER
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory {directory} does not exist")
    if not marker.is_file():
        raise FileNotFoundError(f"checkpoint directory {directory} is incomplete: {MARKER} is missing")
    return json.loads(marker.read_text())


def load_weights(model: nn.Module, directory: Path, *, lora: bool) -> None:
    """Load the weights `save_checkpoint` wrote in `directory` into `model` (the adapter's only, with LoRA);
    a clear error when the checkpoint is missing, incomplete or does not fit the model."""
    from safetensors.torch import load_file

    _read_marker(directory)
    state: dict[str, Any] = {}
    for file in sorted(Path(directory).glob("*.safetensors")):
        try:
            state.update(load_file(str(file)))
        except Exception as exc:  # safetensors raises its own error types
            raise CorruptCheckpointError(f"checkpoint file {file} does not load ({exc})") from exc
    if lora:
        from peft import set_peft_model_state_dict

        unexpected = set_peft_model_state_dict(model, state).unexpected_keys
        missing = [] if state else ["(no adapter weights)"]
    else:
        missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if not m.endswith("lm_head.weight")]:
        raise RuntimeError(f"checkpoint {directory} does not match the model: {missing[:3]} {unexpected[:3]}")


def read_optimizer_state(directory: Path) -> dict[str, Any]:
    """The optimizer state dict saved in ``directory/optimizer.pt`` (on the CPU)."""
    _read_marker(directory)
    path = Path(directory) / OPTIMIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint directory {directory} has no {OPTIMIZER_FILE}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip archive, a pickle error...
        raise CorruptCheckpointError(f"checkpoint file {path} does not load ({exc})") from exc


def load_optimizer_state(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    """Restore ``optimizer`` from ``directory/optimizer.pt`` (tensors go to the params' devices)."""
    optimizer.load_state_dict(read_optimizer_state(directory))
