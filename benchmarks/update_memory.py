"""Peak memory of one GRPO update: logits at every position (the baseline) against scored positions only.

    coevolve bench update-memory                            # SmolLM2-135M, one group of 8
    coevolve bench update-memory --model tiny-random-llama --prompt 200

The batch has the shape of a learning-benchmark update (configs/learning-smollm2.yaml): one group of 8
multi-turn samples sharing a `--prompt`-token prompt (system text and tool docs), then 4 replies of 48
policy tokens with 3 tool outputs of 60 masked tokens between them; one micro-batch of 8, one optimizer
step, KL off (the benchmark's config). Each variant runs in its own process (peak RSS is per process):

    all/shared      logits for every position, common prompt encoded once (the baseline)
    scored/shared   logits only where a row's loss mask scores a token (what the update does)
    all/plain       every position, every row encodes its prompt
    scored/plain    scored positions, every row encodes its prompt

Reported per variant: peak RSS of the process, seconds of the update step, and the ratio to the
baseline with the same prompt handling, also in `benchmarks/results/update-memory.jsonl`. The losses
must agree (same log-probs at scored positions).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

import torch

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

VARIANTS = ("all/shared", "scored/shared", "all/plain", "scored/plain")


def learning_shaped_batch(prompt: int, replies: int = 4, reply: int = 48, tool: int = 60, k: int = 8):
    from coevolve.rl.batch import SampleBatch

    g = torch.Generator().manual_seed(0)
    head = torch.randint(100, 40000, (prompt,), generator=g).tolist()
    ids, masks = [], []
    for _ in range(k):
        row, mask = list(head), [0] * prompt
        for i in range(replies):
            row += torch.randint(100, 40000, (reply,), generator=g).tolist()
            mask += [1] * reply
            if i < replies - 1:
                row += torch.randint(100, 40000, (tool,), generator=g).tolist()
                mask += [0] * tool
        ids.append(row)
        masks.append(mask)
    return SampleBatch(ids, masks, [float(i % 2) for i in range(k)], [0] * k)


def run_variant(variant: str, model_name: str, prompt: int) -> dict:
    from coevolve import rl  # noqa: E402
    from coevolve.llm.models import load_model
    from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer

    scope, prefix = variant.split("/")
    if scope == "all":  # the baseline: a vocabulary projection at every position, whatever the loss mask
        plain, shared = rl.logprobs.token_logprobs, rl.shared_prefix.shared_prefix_logprobs
        rl.update.token_logprobs = lambda *a, score_mask=None, **kw: plain(*a, **kw)
        rl.update.shared_prefix_logprobs = lambda *a, score_rows=None, **kw: shared(*a, **kw)
    model, _ = load_model(model_name)
    model.train()
    batch = learning_shaped_batch(prompt)
    hp = UpdateHyperparams(
        lr=2e-5, temperature=0.8, beta=0.0, micro_batch_size=8, shared_prefix=prefix == "shared"
    )
    optimizer = make_optimizer(model, hp.lr)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    started = time.perf_counter()
    result = grpo_update(model, None, optimizer, batch, hp)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {
        "variant": variant,
        "peak_rss_gb": peak,
        "before_gb": before,
        "seconds": seconds,
        "tokens": sum(len(r) for r in batch.input_ids),
        "grad_norm": result.grad_norm,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("update-memory", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt", type=int, default=700)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.model, args.prompt)))
        return
    results = {}
    for variant in VARIANTS:
        child = subprocess.run(
            [sys.executable, "-m", "coevolve.benchmarks.update_memory", "--model", args.model, "--prompt",
             str(args.prompt), "--variant", variant],
            capture_output=True, text=True,
        )  # fmt: skip
        if child.returncode:
            raise SystemExit(f"{variant} failed:\n{child.stderr[-3000:]}")
        results[variant] = json.loads(child.stdout.strip().splitlines()[-1])
    tokens = results[VARIANTS[0]]["tokens"]
    print(
        f"{args.model} | one group of 8 rows, {tokens} tokens, prompt {args.prompt} | torch {torch.__version__}"
    )
    for variant, r in results.items():
        base = results["all/" + variant.split("/")[1]]
        print(
            f"{variant:<14} peak RSS {r['peak_rss_gb']:5.2f} GB (x{r['peak_rss_gb'] / base['peak_rss_gb']:.2f})"
            f"  step {r['seconds']:6.1f} s (x{r['seconds'] / base['seconds']:.2f})"
            f"  model loaded {r['before_gb']:4.2f} GB  grad norm {r['grad_norm']:.6f}"
        )
    figures = {}
    for variant, r in results.items():
        figures |= {f"{variant} peak RSS": figure(r["peak_rss_gb"], "GB"), f"{variant} step": figure(r["seconds"], "s")}
    record_result("update-memory", figures, command=command_line("update-memory", argv), variant=args.model)


if __name__ == "__main__":
    main()
