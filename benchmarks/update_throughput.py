"""GRPO update throughput on one fixed batch: TRL's GRPOTrainer, our plain path, shared prefix, + LoRA.

    coevolve bench update-throughput --model smollm2-135m

The batch is the one the speed issue describes for the demo config: 2 groups x 8 samples, 340-token
chat-templated prompts, 40-token completions with a 10-token tool output inside (masked), 0/1 rewards
(`benchmarks.trl_baseline.synthetic_samples`). Every variant does one optimizer step over all 16 samples
with KL on (beta > 0: a reference pass), the same micro-batch size and a fresh copy of the model:

    trl          trl.GRPOTrainer (real class, fixed samples through its rollout hook)
    plain        rl.update.grpo_update, shared_prefix=False (every sample encodes its prompt)
    shared       rl.update.grpo_update, shared_prefix=True (the default)
    shared+lora  the same with a rank-16 LoRA adapter; the reference is the adapter disabled

Reported: policy tokens trained per second (forward + backward + optimizer, old/ref passes included),
seconds, peak RSS growth of the step, and each path's speed-up over trl and plain; tokens/s, seconds and
speed-ups also go to `benchmarks/results/update-throughput.jsonl`.
"""

from __future__ import annotations

import copy
import json
import resource
import time
from collections.abc import Sequence

import torch

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.benchmarks.trl_baseline import require_trl, synthetic_samples, trl_update_seconds
from coevolve.rl.batch import SampleBatch
from coevolve.rl.update import UpdateHyperparams, grpo_update, make_optimizer


def sample_batch(samples: list[dict]) -> SampleBatch:
    return SampleBatch(
        input_ids=[s["prompt_ids"] + s["completion_ids"] for s in samples],
        loss_mask=[[0] * len(s["prompt_ids"]) + s["completion_mask"] for s in samples],
        rewards=[s["reward"] for s in samples],
        group_ids=[s["group"] for s in samples],
    )


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def ours(model, batch: SampleBatch, *, shared: bool, lora: bool, args) -> dict:
    model = copy.deepcopy(model)
    reference = None
    if lora:
        from coevolve.rl.trainer import with_lora_adapter

        model = with_lora_adapter(model, 16, 32)
    else:
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    hp = UpdateHyperparams(lr=args.lr, beta=args.beta, micro_batch_size=args.micro_batch_size,
                           temperature=args.temperature, shared_prefix=shared)  # fmt: skip
    optimizer = make_optimizer(model, hp.lr)
    started = time.perf_counter()
    result = grpo_update(model, reference, optimizer, batch, hp)
    seconds = time.perf_counter() - started
    assert result.optimizer_steps == 1 and result.kl >= 0
    return {"seconds": seconds, "policy_tokens": result.tokens, "tokens_per_second": result.tokens / seconds}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("update-throughput", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--variants", nargs="+", default=["plain", "shared", "shared+lora", "trl"])
    parser.add_argument("--repeats", type=int, default=1, help="time each of ours this many times (best)")
    args = parser.parse_args(argv)
    if "trl" in args.variants:
        require_trl()  # before timing the other variants

    from coevolve.llm.models import load_model

    torch.manual_seed(0)
    model, tokenizer = load_model(args.model)
    samples = synthetic_samples(tokenizer, vocab_size=min(len(tokenizer), model.config.vocab_size))
    batch = sample_batch(samples)
    print(
        f"{args.model}: {len(samples)} samples, {batch.policy_tokens(range(len(batch)))} policy tokens, "
        f"micro-batch {args.micro_batch_size}, beta {args.beta}, torch threads {torch.get_num_threads()}"
    )
    results = {}
    for variant in args.variants:
        before = peak_rss_gb()
        if variant == "trl":
            out = trl_update_seconds(copy.deepcopy(model), tokenizer, samples, beta=args.beta,
                                     temperature=args.temperature, lr=args.lr,
                                     micro_batch_size=args.micro_batch_size)  # fmt: skip
        else:
            runs = [ours(model, batch, shared=variant.startswith("shared"), lora=variant.endswith("lora"), args=args)
                    for _ in range(args.repeats)]  # fmt: skip
            out = min(runs, key=lambda r: r["seconds"])
        out = {k: out[k] for k in ("seconds", "policy_tokens", "tokens_per_second")}
        out["peak_rss_growth_gb"] = round(peak_rss_gb() - before, 2)
        results[variant] = out
        print(variant, json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}),
              flush=True)  # fmt: skip
    print(f"\n{'variant':<12} {'tok/s':>8} {'seconds':>8} {'x trl':>6} {'x plain':>8}")
    figures = {}
    for variant, out in results.items():
        vs = {
            b: out["tokens_per_second"] / results[b]["tokens_per_second"]
            for b in ("trl", "plain")
            if b in results
        }
        print(f"{variant:<12} {out['tokens_per_second']:>8.1f} {out['seconds']:>8.1f} "
              f"{vs.get('trl', float('nan')):>6.2f} {vs.get('plain', float('nan')):>8.2f}")  # fmt: skip
        figures |= {f"{variant}": figure(out["tokens_per_second"], "tokens/s"),
                    **{f"{variant} x {b}": figure(ratio, "x") for b, ratio in vs.items() if b != variant}}  # fmt: skip
    record_result("update-throughput", figures, command=command_line("update-throughput", argv), variant=args.model)


if __name__ == "__main__":
    main()
