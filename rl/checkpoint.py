"""Policy checkpoints in Hugging Face `save_pretrained` layout, written atomically.

Layout of a checkpoint directory:

    config.json, model.safetensors (or adapter_config.json + adapter_model.safetensors for peft),
    tokenizer files (with the chat template training used: `save_tokenizer`), optimizer.pt (optional),
    coevolve_checkpoint.json (completion marker, last; the sha256 of every other file),
    optimizer.dropped (only once optimizer.pt was deleted on purpose: `drop_optimizer_state`)

The weights are saved in the dtype the model trains in (`model.dtype`: float32, bfloat16 or float16), never
cast, and load back bit for bit; a peft model's checkpoint holds its adapter only (`adapter_model.safetensors`,
and optimizer state for the adapter's weights only). For SmolLM2-135M that is 538 MB of float32 weights
(269 MB in bfloat16; 9.8 MB for a rank-8 adapter on every linear layer).
The optimizer state (AdamW: two tensors per weight, twice the weights' size) is what continuing the
training needs, and only the newest two checkpoints of a run keep it: `drop_optimizer_state` deletes it
from the older ones once a newer one is saved (`stages.grpo_update.stage`), leaving a note. Loading such a
checkpoint loads its weights as before; `load_optimizer_state` then starts the optimizer fresh and says so
(it returns False), `read_optimizer_state` refuses in one line.

Everything is written into ``<name>.tmp-<pid>`` next to the target, every file and the directory
fsynced, and renamed into place, so a reader never sees a half-written checkpoint under its final name
and a power loss cannot leave a renamed but empty one. An existing checkpoint of the same name is first
renamed aside and deleted only after the new one is in place. Leftovers of a writer killed half-way
(``*.tmp-<pid>``, ``*.old-<pid>``) are removed by `remove_leftovers` before the next write. A symlink in the
way (the checkpoint's folder, its temporary name, a folder above it in the run) is refused before anything
is written (`coevolve.run_files.PlantedLinkError`), and a full disk or file-size limit is a `DiskFullError`
naming the file being written and the checkpoint's size, the temporary folder removed.
A file that does not load (truncated, edited) raises `CorruptCheckpointError` naming it, and so does a
weights or optimizer file whose sha256 is not the one the marker recorded when it was saved: loading
hashes it (at most once per process, `coevolve.file_hashes.file_sha256`; never for the files this process
saved), so a flipped bit is refused instead of trained on.

`load_weights` loads a checkpoint's weights into a model of the same architecture (the whole model, or
a peft adapter's weights into a model carrying that adapter). The `grpo_update` stage writes one
checkpoint per round; the policy (`agents.policy`) and launched updates load them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from coevolve.file_hashes import dropped_note, file_sha256, remember_sha256
from coevolve.run_files import atomic_file, disk_full, refuse_links

MARKER = "coevolve_checkpoint.json"
OPTIMIZER_FILE = "optimizer.pt"
OPTIMIZER_DROPPED = dropped_note(Path(OPTIMIZER_FILE)).name
"""Left in a checkpoint whose optimizer state was deleted on purpose (`drop_optimizer_state`): its text says
when and why, and checks of the manifest that recorded `optimizer.pt` skip it (`file_hashes.dropped_note`)."""


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
    tmp = directory.with_name(f"{directory.name}.tmp-{os.getpid()}")
    for path in (directory, tmp, directory.with_name(f"{directory.name}.old-{os.getpid()}")):
        refuse_links(path)
    directory.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    writing = tmp
    try:
        writing = tmp / ("adapter_model.safetensors" if _is_peft(model) else "model.safetensors")
        model.save_pretrained(tmp, **({} if state is None else {"state_dict": state[0]}))
        if tokenizer is not None:
            writing = tmp / "tokenizer.json"
            save_tokenizer(tokenizer, tmp)
        if optimizer is not None:
            writing = tmp / OPTIMIZER_FILE
            _save_torch(optimizer.state_dict() if state is None else state[1], writing)
        hashes = {str(p.relative_to(tmp)): file_sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        marker = {"kind": "adapter" if _is_peft(model) else "full", "optimizer": optimizer is not None,
                  "sha256": hashes}  # fmt: skip
        writing = tmp / MARKER
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _fsync_tree(tmp)
        _replace_dir(tmp, directory)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        weights, moments = checkpoint_bytes(model, optimizer, state)
        needed = moments if writing.name == OPTIMIZER_FILE else weights if writing.suffix == ".safetensors" else None
        full = disk_full(exc, directory / writing.relative_to(tmp), needed)
        if full is not None:
            raise full from exc
        raise
    for name, sha in hashes.items():  # this process knows them: loading or checking them reads nothing
        remember_sha256(directory / name, sha)


def checkpoint_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None,
                     state: tuple[dict[str, Any], dict[str, Any]] | None = None) -> tuple[int, int]:
    """About how many bytes `save_checkpoint` writes: the weights it saves, and the optimizer's tensors."""
    weights = state[0] if state is not None else (
        {n: p for n, p in model.named_parameters() if p.requires_grad} if _is_peft(model) else model.state_dict())
    moments = state[1]["state"] if state is not None else optimizer.state_dict()["state"] if optimizer else {}
    return _bytes(weights.values()), _bytes(t for entry in moments.values() for t in entry.values())


def _bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class _KeptWriteError:
    """A file that keeps the OS error of a failed write: torch.save reports one as "unexpected pos",
    without the error (a full disk) that caused it."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.error = handle, None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def _save_torch(obj: Any, path: Path) -> None:
    with open(path, "xb") as handle:
        kept = _KeptWriteError(handle)
        try:
            torch.save(obj, kept)
        except RuntimeError as exc:
            if kept.error is None:
                raise
            raise kept.error from exc


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


def _check_saved(path: Path, marker: dict) -> None:
    """Refuse `path` unless it holds the bytes saved with the checkpoint (the marker's sha256; a marker
    of an older version records none, and nothing is checked)."""
    if "sha256" not in marker:
        return
    expected = marker["sha256"].get(path.name)
    if expected is None:
        raise CorruptCheckpointError(f"checkpoint file {path} was not saved with the checkpoint")
    if not path.is_file():
        raise CorruptCheckpointError(f"checkpoint file {path} is missing")
    found = file_sha256(path)
    if found != expected:
        raise CorruptCheckpointError(f"checkpoint file {path} is not the one saved (sha256 {found[:12]}, saved "
                                     f"{expected[:12]})")


def load_weights(model: nn.Module, directory: Path, *, lora: bool) -> None:
    """Load the weights `save_checkpoint` wrote in `directory` into `model` (the adapter's only, with LoRA);
    a clear error when the checkpoint is missing, incomplete or does not fit the model."""
    from safetensors.torch import load_file

    marker = _read_marker(directory)
    recorded = {name for name in marker.get("sha256", {}) if name.endswith(".safetensors")}
    state: dict[str, Any] = {}
    for file in sorted({*Path(directory).glob("*.safetensors"), *(Path(directory) / n for n in recorded)}):
        _check_saved(file, marker)
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
    marker = _read_marker(directory)
    path = Path(directory) / OPTIMIZER_FILE
    if not path.is_file():
        dropped = optimizer_dropped(directory)
        if dropped is not None:
            raise FileNotFoundError(f"checkpoint directory {directory} has no {OPTIMIZER_FILE}: {dropped}")
        raise FileNotFoundError(f"checkpoint directory {directory} has no {OPTIMIZER_FILE}")
    _check_saved(path, marker)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated zip archive, a pickle error...
        raise CorruptCheckpointError(f"checkpoint file {path} does not load ({exc})") from exc


def load_optimizer_state(optimizer: torch.optim.Optimizer, directory: Path) -> bool:
    """Restore ``optimizer``'s state (moments, step counts) from ``directory/optimizer.pt`` (tensors go to the
    params' devices); its hyper-parameters (learning rate, weight decay, betas) stay the ones it was built
    with, from the run's config: a run continued with `--set train.lr=...` (after a divergence, say) steps at
    the new rate. From a checkpoint whose optimizer state was dropped on purpose (`drop_optimizer_state`: a
    newer checkpoint keeps the run's) ``optimizer`` starts fresh (whatever state it held is forgotten: it
    belongs to other weights), and the answer is False."""
    if not (Path(directory) / OPTIMIZER_FILE).is_file() and optimizer_dropped(directory) is not None:
        _read_marker(directory)  # still a complete checkpoint
        optimizer.state.clear()
        return False
    with own_hyperparameters(optimizer):
        optimizer.load_state_dict(read_optimizer_state(directory))
    return True


@contextlib.contextmanager
def own_hyperparameters(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Whatever the block loads into ``optimizer``, its param groups' hyper-parameters are put back after."""
    kept = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    yield
    for group, values in zip(optimizer.param_groups, kept, strict=True):
        group.update(values)


def optimizer_dropped(directory: Path) -> str | None:
    """Why ``directory``'s optimizer state was dropped (`drop_optimizer_state`), or None if it was not."""
    note = Path(directory) / OPTIMIZER_DROPPED
    return note.read_text().strip() if note.is_file() else None


def drop_optimizer_state(directory: Path, newer: Path) -> bool:
    """Delete ``directory/optimizer.pt`` now that the checkpoint ``newer`` keeps the run's optimizer state,
    leaving the note `OPTIMIZER_DROPPED` (written first: a crash in between leaves a loadable file). The
    weights, tokenizer and marker stay as saved, so their recorded sha256 still hold. Returns whether a
    file was deleted."""
    path = Path(directory) / OPTIMIZER_FILE
    if not path.is_file():
        return False
    note = (f"optimizer state dropped when {Path(newer).name} was saved (only a run's newest two "
            f"checkpoints keep one); an update continuing from these weights starts its optimizer fresh")
    with atomic_file(Path(directory) / OPTIMIZER_DROPPED) as handle:
        handle.write((note + "\n").encode())
    path.unlink()
    _fsync_dir(Path(directory))
    return True
