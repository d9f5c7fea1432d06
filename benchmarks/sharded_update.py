"""Peak memory per process of a launched GRPO update: whole copies (data parallel) against FSDP shards.

    coevolve bench sharded-update                           # SmolLM2-135M, 2 CPU processes
    coevolve bench sharded-update --model tiny-random-llama

Each variant is one `accelerate launch` of 2 processes with the repository's accelerate config
(`configs/accelerate/two-processes.yaml` or `two-processes-fsdp.yaml`), model.device cpu (gloo), doing
what `executors.accelerate_update` does: load the policy, shard it for FSDP (`rl.sharding.shard_model`),
AdamW, one update on a learning-benchmark-shaped batch (`benchmarks.update_memory.learning_shaped_batch`:
one group of 8, 4 replies of 48 tokens) with 4 micro-batches of 2, and, for FSDP, gathering the
checkpoint state onto process 0. Reported per variant and process: the weights and AdamW moments it
holds after the update (its shards under FSDP), peak RSS (activations included), seconds of the update,
the gradient norm (must agree between variants); the same go to `benchmarks/results/sharded-update.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

CONFIGS = {"data-parallel": "configs/accelerate/two-processes.yaml",
           "fsdp": "configs/accelerate/two-processes-fsdp.yaml"}  # fmt: skip


def worker(model_name: str, prompt: int, sharded: bool, out: Path) -> None:
    """One process of a launched update (under `accelerate launch`)."""
    import torch
    from accelerate import Accelerator

    from coevolve.benchmarks.update_memory import learning_shaped_batch
    from coevolve.llm.models import load_model
    from coevolve.rl.sharding import full_state, shard_model
    from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model, _ = load_model(model_name, dtype="float32", device="cpu")
    if sharded:
        shard_model(model)
    optimizer = make_optimizer(model, 1e-5)
    batch = learning_shaped_batch(prompt)
    started = time.perf_counter()
    result = grpo_update(model, None, optimizer, batch, UpdateHyperparams(lr=1e-5, micro_batch_size=2, beta=0.0,
                                                                          shared_prefix=False),
                         accelerator=accelerator)  # fmt: skip
    seconds = time.perf_counter() - started
    held = state_megabytes(model, optimizer)
    if sharded:
        full_state(model, optimizer)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {"rank": accelerator.process_index, "state_mb": round(held), "peak_rss_mb": round(peak_mb),
              "update_s": round(seconds, 2),
              "grad_norm": result.grad_norm}  # fmt: skip
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(record))
    accelerator.wait_for_everyone()


def state_megabytes(model, optimizer) -> float:
    """MB this process holds of weights and AdamW moments (its shards, under FSDP)."""
    import torch

    def local(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    tensors = list(model.parameters()) + [v for s in optimizer.state.values() for v in s.values()
                                          if isinstance(v, torch.Tensor) and v.dim() > 0]  # fmt: skip
    return sum(local(t) for t in tensors) / 2**20


def launch(variant: str, model: str, prompt: int) -> list[dict]:
    accelerate = Path(sys.executable).with_name("accelerate")
    with tempfile.TemporaryDirectory() as tmp:
        command = [str(accelerate), "launch", "--config_file", CONFIGS[variant], "-m", "coevolve.benchmarks.sharded_update",
                   "--worker", "--model", model, "--prompt", str(prompt), "--out", tmp]  # fmt: skip
        if variant == "fsdp":
            command.append("--sharded")
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode:
            raise RuntimeError(f"{variant} failed:\n{done.stderr[-3000:]}")
        return [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank*.json"))]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("sharded-update", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt", type=int, default=600, help="prompt tokens of the batch's group")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sharded", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.model, args.prompt, args.sharded, args.out)
        return
    print(f"model {args.model}, 2 CPU processes, batch: 1 group of 8, prompt {args.prompt} tokens")
    print("| variant | process | weights + AdamW held (MB) | peak RSS (MB) | update (s) | grad norm |\n"
          "|---|---|---|---|---|---|")
    base, figures = None, {}
    for variant in CONFIGS:
        for rec in launch(variant, args.model, args.prompt):
            base = base or rec["peak_rss_mb"]
            print(f"| {variant} | {rec['rank']} | {rec['state_mb']} | {rec['peak_rss_mb']} ({rec['peak_rss_mb'] / base:.2f}x) | "
                  f"{rec['update_s']} | {rec['grad_norm']:.6f} |", flush=True)  # fmt: skip
            process = f"{variant}, process {rec['rank']}"
            figures |= {f"{process}, weights + AdamW held": figure(rec["state_mb"], "MB"),
                        f"{process}, peak RSS": figure(rec["peak_rss_mb"], "MB"),
                        f"{process}, update": figure(rec["update_s"], "s"),
                        f"{process}, grad norm": figure(rec["grad_norm"], "")}  # fmt: skip
    record_result("sharded-update", figures, command=command_line("sharded-update", argv), variant=args.model)


if __name__ == "__main__":
    main()
