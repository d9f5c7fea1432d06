"""Rollout throughput with N policy servers against one, on the same tasks (CPU: the tiny model).

    coevolve bench served-rollout                           # 1 and 2 servers, in process
    coevolve bench served-rollout --servers 1 2 4 --tasks 16 --k 4

Runs the agent loop (`agents.episodes.run_episodes`) on `--tasks` tool-world training tasks x `--k`
samples three ways and prints wall time, episodes/s and generated tokens/s of each:

- in process: `HfEngine` on all cores, KV sessions (what a CPU run does);
- through `OpenAIEngine` over N servers for each N in `--servers`: N processes of
  `benchmarks.hf_completion_server` (the CPU stand-in for vLLM), the cores split between them (or
  `--threads-per-server` each: more servers, more compute), requests spread round-robin with up to 32 in
  flight, as `model.servers` does.

Sampling is seeded but the paths do not sample the same sequences (batch composition changes the
kernels' rounding), so compare tokens/s, not wall time alone. Each path gets an untimed warm-up call.
The tokens/s of each path go to `benchmarks/results/served-rollout.jsonl`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence

import torch

from coevolve import envs
from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model
from coevolve.llm.openai_engine import OpenAIEngine


def _rollout(engine, chat: ChatFormat, jobs, sampling: SamplingParams, limits: EpisodeLimits) -> dict:
    run_episodes(engine, chat, lambda: envs.make("toolworld", seed=0), jobs[:2], sampling, limits)  # warm-up
    started = time.perf_counter()
    episodes = run_episodes(engine, chat, lambda: envs.make("toolworld", seed=0), jobs, sampling, limits, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(ep.completion_tokens for ep in episodes)
    return {"seconds": seconds, "episodes": len(episodes), "tokens": tokens,
            "replies": sum(ep.replies for ep in episodes)}  # fmt: skip


def _start_servers(model: str, count: int, threads: int, base_port: int) -> list[subprocess.Popen]:
    servers = []
    for i in range(count):
        command = [sys.executable, "-m", "coevolve.benchmarks.hf_completion_server", "--model", model,
                   "--port", str(base_port + i), "--threads", str(threads)]  # fmt: skip
        servers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, "OMP_NUM_THREADS": str(threads)}))  # fmt: skip
    for i in range(count):
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{base_port + i}/v1/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or servers[i].poll() is not None:
                    raise RuntimeError(f"server {i} did not start") from None
                time.sleep(0.5)
    return servers


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("served-rollout", __doc__)
    parser.add_argument("--model", default="tiny-random-llama")
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-replies", type=int, default=3)
    parser.add_argument("--threads-per-server", type=int, help="default: the cores split between the servers")
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    tasks = envs.make("toolworld", seed=0).tasks("train")[: args.tasks]
    jobs = [(task, sample) for task in tasks for sample in range(args.k)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    limits = EpisodeLimits(max_replies=args.max_replies, max_context_tokens=4096)
    model, tokenizer = load_model(args.model)
    chat = ChatFormat(tokenizer)
    print(f"{args.model} | {len(jobs)} episodes ({len(tasks)} tool-world tasks x {args.k}) | "
          f"<= {args.max_replies} replies of <= {args.max_new_tokens} tokens | {cores} cores", flush=True)

    results = {}
    torch.set_num_threads(cores)
    results["in process (HfEngine)"] = _rollout(HfEngine(model, tokenizer, batch_size=32), chat, jobs, sampling, limits)
    base_port = 21000 + os.getpid() % 5000
    for count in args.servers:
        threads = args.threads_per_server or max(1, cores // count)
        servers = _start_servers(args.model, count, threads, base_port)
        try:
            urls = [f"http://127.0.0.1:{base_port + i}/v1" for i in range(count)]
            engine = OpenAIEngine(urls, args.model, tokenizer=tokenizer, token_ids=True, api_key_env=None)
            results[f"{count} server(s) x {threads} thr"] = _rollout(engine, chat, jobs, sampling, limits)
        finally:
            for server in servers:
                server.terminate()
                server.wait()
        base_port += count

    first_served = next(r for label, r in results.items() if "server" in label)
    for label, r in results.items():
        rate = r["tokens"] / r["seconds"]
        ratio = rate / (first_served["tokens"] / first_served["seconds"])
        print(f"{label:<24} {r['seconds']:7.1f} s  {r['episodes'] / r['seconds']:6.2f} episodes/s  "
              f"{rate:7.1f} tokens/s (x{ratio:.2f} of {args.servers[0]} server)  "
              f"{r['tokens']} tokens, {r['replies']} replies", flush=True)
    figures = {label: figure(r["tokens"] / r["seconds"], "tokens/s") for label, r in results.items()}
    threads = f", {args.threads_per_server} thread(s) per server" if args.threads_per_server else ""
    record_result("served-rollout", figures, command=command_line("served-rollout", argv), variant=args.model + threads)


if __name__ == "__main__":
    main()
