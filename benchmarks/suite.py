"""The benchmark suite: one registry from a benchmark's name to its module, and the `coevolve bench` command.

    coevolve bench list                      # every benchmark, one line each
    coevolve bench NAME [ARGS...]            # run one; `coevolve bench NAME --help` for its options
    coevolve bench report [--check]          # benchmarks/RESULTS.md from benchmarks/results/

Each benchmark is a module of `coevolve.benchmarks` with a `main(argv)` entry (its own options, also
`python -m coevolve.benchmarks.MODULE`) that appends what it measured to `benchmarks/results/NAME.jsonl`
(`benchmarks.record`). A module is imported only when its benchmark runs, so listing costs nothing.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    module: str
    """Module under `coevolve.benchmarks` holding `main(argv)`."""
    description: str


BENCHMARKS: dict[str, Benchmark] = {
    "learning": Benchmark("learning", "CoEvolve against GRPO at equal rollout budget, with the paper's ablations"),
    "zero-shot": Benchmark("zero_shot", "zero-shot success of a model on environment splits, through the agent loop"),
    "first-reply-probe": Benchmark("first_reply_probe", "prompt variants: how often the first reply is a well-formed, right, exact call"),
    "warm-start-probe": Benchmark("warm_start_probe", "training success of the warm-started policy, per family"),
    "abstraction-probe": Benchmark("abstraction_probe", "how many of a teacher's abstractions pass verification's environment checks"),
    "explore-yield": Benchmark("explore_yield", "each exploration link alone on validation worlds: named gap tool called, verified, admitted"),
    "teacher-prefill-probe": Benchmark("teacher_prefill_probe", "reflection replies that parse, with and without the assistant prefill"),
    "signals": Benchmark("signals_bench", "speed of extract_signals on a 5M-step ledger, against plain Python"),
    "bfcl-replay": Benchmark("bfcl_replay", "BFCL ground truths replayed through our environment, timed against bfcl-eval's checker"),
    "rollout-efficiency": Benchmark("rollout_efficiency", "agent-loop tokens/s against one batched generate; prefill per episode"),
    "staleness": Benchmark("staleness", "rounds per hour at equal samples: synchronous against rollout.max_staleness 1, alternating"),
    "round-overhead": Benchmark("round_overhead", "a round's wall time that is neither generation nor the update"),
    "profile-round": Benchmark("profile_round", "where a round's time goes, by kind of work"),
    "update-throughput": Benchmark("update_throughput", "one GRPO update: TRL's GRPOTrainer, our plain path, shared prefix, + LoRA"),
    "update-memory": Benchmark("update_memory", "peak memory of one GRPO update: logits at every position or at scored ones"),
    "sharded-update": Benchmark("sharded_update", "memory per process of a launched update: whole copies against FSDP shards"),
    "served-rollout": Benchmark("served_rollout", "rollout throughput with N policy servers against one"),
    "vllm-rollout": Benchmark("vllm_rollout", "the GRPO config with its policy served by vLLM (CPU build) against in process; weight-sync times"),
    "vllm-numerics": Benchmark("vllm_numerics", "importance ratio of vLLM-sampled tokens under the trainer, float32 and bfloat16"),
    "ray-envs": Benchmark("ray_envs", "Ray environment actors against a local process pool, on BFCL replays"),
    "deployment-overhead": Benchmark("deployment_overhead", "`prefect deployment run` against `coevolve run`, and a cached re-run"),
    "duckdb-scale": Benchmark("duckdb_scale", "the documented SQL queries over a 10M-row steps view"),
    "demo": Benchmark("demo_run", "what `make demo` costs and what its data evolution admits and trains on"),
    "cached-rerun": Benchmark("cached_rerun", "a finished run re-run from a fresh process: `coevolve run` against the flow"),
    "faults": Benchmark("faults", "kill -9, a second writer, corrupt files and weights, a full disk, divergence: faults injected into runs and survived"),
    "ui-pages": Benchmark("ui_pages", "every page of the web view (`coevolve ui`) over a 10M-row steps view"),
    "trl-baseline": Benchmark("trl_baseline", "one optimizer step of TRL's GRPOTrainer on fixed samples (part of update-throughput)"),
    "teacher-warm-start": Benchmark("teacher_warm_start", "tool: build the evolving arms' teacher checkpoint and print its path"),
    "hf-completion-server": Benchmark("hf_completion_server", "tool: a CPU stand-in for a vLLM server (started by served-rollout)"),
}  # fmt: skip
COMMANDS = {"list": "suite", "report": "report"}
"""Names `coevolve bench` keeps for itself, and the modules of their entries (`list_benchmarks`, `main`)."""


def argument_parser(name: str, doc: str | None = None) -> argparse.ArgumentParser:
    """The parser of benchmark `name`, named as the command that runs it and described as the registry
    describes it (else by `doc`'s first line); the epilog is `doc`, the module docstring."""
    description = BENCHMARKS[name].description if name in BENCHMARKS else (doc or name).splitlines()[0]
    return argparse.ArgumentParser(prog=f"coevolve bench {name}", description=description, epilog=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip


def entry(name: str) -> Callable[[Sequence[str]], None]:
    """The `main(argv)` of benchmark `name`, or of `list` / `report`; raises ValueError for a name that is
    neither."""
    if name == "list":
        return list_benchmarks
    if name not in BENCHMARKS and name not in COMMANDS:
        raise ValueError(f"no benchmark named {name!r}; `coevolve bench list` lists them")
    module = BENCHMARKS[name].module if name in BENCHMARKS else COMMANDS[name]
    return importlib.import_module(f"coevolve.benchmarks.{module}").main


def list_benchmarks(argv: Sequence[str] = ()) -> None:
    width = max(map(len, BENCHMARKS))
    for name, bench in BENCHMARKS.items():
        print(f"{name:<{width}}  {bench.description}")


def main(argv: Sequence[str]) -> None:
    """`coevolve bench NAME [ARGS...]` (also `python -m coevolve.benchmarks NAME [ARGS...]`)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1] + "\n")
        list_benchmarks()
        return
    try:
        run = entry(argv[0])
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    run(list(argv[1:]))
