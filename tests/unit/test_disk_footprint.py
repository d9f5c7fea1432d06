"""What runs take on disk (issue 62, item 6). Checkpoints keep the weights in the dtype the model trains in
(bfloat16, float16: half of float32) and load back bit for bit, with AdamW moments of that dtype; a LoRA
checkpoint holds the adapter only. `coevolve runs` shows each run's size, what a fork's hard links share
with another run, and the storage root's total with each file counted once."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.flows.runs import disk_use
from coevolve.llm.models import load_model
from coevolve.rl.checkpoint import OPTIMIZER_FILE, load_weights, read_optimizer_state, save_checkpoint
from coevolve.rl.update import make_optimizer
from tests.unit.test_cli import make_run


def trained(dtype: str, *, lora_rank: int = 0):
    """tiny-random-llama in `dtype` after one AdamW step (moments that are not zero), LoRA when asked."""
    model, tokenizer = load_model("tiny-random-llama", dtype=dtype)
    if lora_rank:
        from coevolve.config import TrainConfig
        from coevolve.rl.trainer import with_lora_adapter

        model = with_lora_adapter(model, lora_rank, TrainConfig().lora_alpha)
    optimizer = make_optimizer(model, 1e-2)
    generator = torch.Generator().manual_seed(0)
    for p in model.parameters():
        if p.requires_grad:
            # gradients away from 0: AdamW's eps (1e-8) is 0 in float16, and a tiny gradient would step by inf
            p.grad = (0.5 + torch.rand(p.shape, generator=generator)).to(p.dtype)
    optimizer.step()
    assert all(p.isfinite().all() for p in model.parameters())
    return model, tokenizer, optimizer


def safetensors_of(path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), framework="pt") as saved:
        return {name: saved.get_tensor(name) for name in saved.keys()}  # noqa: SIM118


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_weights_are_saved_at_half_the_size_and_load_back_bit_for_bit(tmp_path, dtype):
    model, tokenizer, optimizer = trained(dtype)
    save_checkpoint(model, tokenizer, optimizer, tmp_path / "ckpt")
    weights = safetensors_of(tmp_path / "ckpt" / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {getattr(torch, dtype)}
    assert sum(t.numel() * t.element_size() for t in weights.values()) == sum(
        p.numel() * 2 for p in model.parameters())  # tied embeddings once, two bytes a weight

    fresh, _ = load_model("tiny-random-llama", dtype=dtype)
    assert not all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True))
    load_weights(fresh, tmp_path / "ckpt", lora=False)
    for (name, a), b in zip(fresh.state_dict().items(), model.state_dict().values(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    moments = read_optimizer_state(tmp_path / "ckpt")["state"]
    assert {t.dtype for s in moments.values() for k, t in s.items() if k != "step"} == {getattr(torch, dtype)}


def test_a_lora_checkpoint_holds_the_adapter_and_its_optimizer_state_only(tmp_path):
    model, tokenizer, optimizer = trained("float32", lora_rank=4)
    save_checkpoint(model, tokenizer, optimizer, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "model.safetensors").exists()
    adapter = safetensors_of(tmp_path / "ckpt" / "adapter_model.safetensors")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert adapter and all("lora_" in name for name in adapter)
    assert sum(t.numel() for t in adapter.values()) == trainable
    assert trainable * 20 < sum(p.numel() for p in model.parameters())
    moments = read_optimizer_state(tmp_path / "ckpt")["state"].values()
    assert sum(s["exp_avg"].numel() + s["exp_avg_sq"].numel() for s in moments) == 2 * trainable
    assert (tmp_path / "ckpt" / OPTIMIZER_FILE).stat().st_size < 3 * 4 * trainable + 100_000


def runs_listing(root) -> dict[str, list[str]]:
    result = CliRunner().invoke(app, ["runs", "--root", str(root)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if " run " in line and " disk" in line)
    cells = [c.strip() for c in header.replace("┃", "|").split("|")]
    rows = {c[0]: c for line in lines if (c := [x.strip() for x in line.replace("│", "|").split("|")])[0] in
            ("alpha", "beta")}  # fmt: skip
    return {run: dict(zip(cells, row, strict=True))["disk"] for run, row in rows.items()} | {"": lines}


def test_coevolve_runs_shows_each_runs_size_what_it_shares_and_the_roots_total(tmp_path):
    alpha, beta = make_run(tmp_path, "alpha"), make_run(tmp_path, "beta")
    weights = alpha.checkpoint_dir(0) / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"\0" * 3_000_000)
    beta.checkpoint_dir(0).mkdir(parents=True)
    os.link(weights, beta.checkpoint_dir(0) / "model.safetensors")  # as `coevolve fork` shares a checkpoint
    (beta.checkpoint_dir(0) / OPTIMIZER_FILE).write_bytes(b"\0" * 1_000_000)
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere.bin"
    outside.write_bytes(b"\0" * 9_000_000)
    (beta.run_dir / "link").symlink_to(outside)  # a symlink is neither followed nor counted

    listing = runs_listing(tmp_path)
    assert (listing["alpha"], listing["beta"]) == ("3.0 MB", "4.0 MB")
    notes = listing[""][-3:]
    assert notes[0] == f"{tmp_path}: 4.0 MB on disk, 4.0 MB of it checkpoints"  # hard links once
    assert notes[1].startswith("run 'alpha': 3.0 MB of its 3.0 MB hard-linked with files outside its folder")
    assert notes[2].startswith("run 'beta': 3.0 MB of its 4.0 MB hard-linked") and "does not free" in notes[2]

    use = disk_use(beta.run_dir)
    small = sum(p.stat().st_size for p in beta.run_dir.rglob("*") if p.is_file() and not p.is_symlink()) - 4_000_000
    assert (use.total, use.checkpoints, use.shared) == (4_000_000 + small, 4_000_000, 3_000_000)
    outside.unlink()


def test_a_run_without_hard_links_shares_nothing(tmp_path):
    layout = make_run(tmp_path, "alpha")
    (layout.checkpoint_dir(0)).mkdir(parents=True)
    (layout.checkpoint_dir(0) / "model.safetensors").write_bytes(b"\0" * 2_400_000)
    os.link(layout.checkpoint_dir(0) / "model.safetensors", layout.run_dir / "twice")  # both links in the run
    listing = runs_listing(tmp_path)
    assert listing["alpha"] == "2.4 MB" and not [line for line in listing[""] if "hard-linked" in line]
