"""The plain GRPO config with the policy served by vLLM's CPU build against the in-process engine, and the
time one weight sync takes (full weights and a LoRA adapter).

    coevolve bench vllm-rollout                                    # configs/toolworld-smollm2.yaml (plain GRPO), 2 rounds
    coevolve bench vllm-rollout --rounds 3 --syncs 5
    coevolve bench vllm-rollout --repeats 2 --set eval.max_tasks=8 --note "a shared machine"

Runs `coevolve run CONFIG` in a fresh storage root, the same config every time: in process (the
transformers engine), and with `model.servers` pointing at a vLLM server started for it (the command
`coevolve engine serve` runs; that config trains all weights, so each update's checkpoint is reloaded in
place), `--repeats` times each, the two arms alternating (in process first, then served, served, in
process, ...: a load that drifts over the run weighs on both alike). From the runs' manifests: the rollout
stage's generated tokens per second in every round, and each round's wall time (first stage start to last
stage end; round 0 holds the baseline evaluation too), each the mean over the repeats. The served run pays
for its weight syncs inside its rounds. From the server's own counters (`/metrics`) over a served run:
the prefix-cache hit rate and the mean tokens per engine step (how full its batches were).

Then the sync itself, repeated `--syncs` times on an idle server: the full-weight reload of the run's
checkpoints (pause, reload, prefix-cache reset, resume), and, on a second server started with LoRA on, the
hot-load of a rank-`--lora-rank` adapter (load the new one, unload the previous one).

The machine is shared with other jobs: the load average at the start and at the end is recorded with the
figures; the served/in-process ratios of one run are the figures to compare, more than the absolute ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.processes import free_port


def round_figures(run_dir: Path) -> dict[int, dict[str, float]]:
    """Per round: rollout tokens/s and generated tokens, and the round's wall time, from the manifests."""
    rounds: dict[int, dict[str, float]] = {}
    for manifest in sorted(run_dir.glob("round=*/stage=*/_manifest.json")):
        data = json.loads(manifest.read_text())
        entry = rounds.setdefault(int(data["round"]), {"start": float("inf"), "end": 0.0})
        entry["start"] = min(entry["start"], data["started_at"])
        entry["end"] = max(entry["end"], data["started_at"] + data["seconds"])
        if data["stage"] == "rollout":
            entry["tokens_per_second"] = data["outputs"]["tokens_per_second"]
            entry["generated_tokens"] = data["outputs"]["generated_tokens"]
    return {r: {**e, "wall_s": e["end"] - e["start"]} for r, e in sorted(rounds.items())}


def run_demo(config: str, root: Path, run: str, rounds: int, overrides: list[str]) -> dict[int, dict[str, float]]:
    command = [sys.executable, "-m", "coevolve.cli", "run", config, "--run", run, "--rounds", str(rounds),
               "--root", str(root), *[arg for o in overrides for arg in ("--set", o)]]  # fmt: skip
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    print(f"  {run}: {time.perf_counter() - started:.0f} s in all", flush=True)
    return round_figures(root / f"run={run}")


COUNTERS = ("prefix_cache_queries_total", "prefix_cache_hits_total", "iteration_tokens_total_sum",
            "iteration_tokens_total_count")  # fmt: skip
"""The server's Prometheus counters read around a served run (vLLM's names without the `vllm:` prefix)."""


def server_counters(url: str) -> dict[str, float]:
    """The `COUNTERS` of the server at `url` (`GET /metrics`)."""
    from coevolve.loopback import http_client

    with http_client(url, timeout=10) as client:
        return parse_counters(client.get(url.removesuffix("/v1") + "/metrics").text)


def parse_counters(text: str) -> dict[str, float]:
    """The `COUNTERS` in Prometheus text, each summed over its label sets (0 where absent)."""
    import re

    return {name: sum(float(v) for v in re.findall(rf"^vllm:{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))
            for name in COUNTERS}  # fmt: skip


def time_syncs(url: str, model: str, directories: list[Path], syncs: int) -> list[float]:
    """Seconds of each `OpenAIEngine.update_weights` over `directories` in turn (a new version each time)."""
    from coevolve.llm.models import load_model
    from coevolve.llm.openai_engine import OpenAIEngine

    _, tokenizer = load_model(model)
    engine = OpenAIEngine(url, model, tokenizer=tokenizer, version="bench")
    seconds = []
    for i in range(syncs):
        started = time.perf_counter()
        engine.update_weights(directories[i % len(directories)], version=f"bench-{i}")
        seconds.append(time.perf_counter() - started)
    return seconds


def lora_adapter(model_name: str, rank: int, directory: Path) -> Path:
    """A rank-`rank` LoRA adapter on every linear layer with random B (a fresh one would be the identity)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from coevolve.llm.models import load_model

    model = get_peft_model(load_model(model_name)[0], LoraConfig(r=rank, lora_alpha=32, target_modules="all-linear",
                                                                 task_type="CAUSAL_LM"))  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.01)
    model.save_pretrained(directory)
    return directory


def time_both_syncs(args: Any, config: Any, url: str, work: Path) -> dict[str, dict]:
    """The figures of `args.syncs` full-weight syncs of the last served run's checkpoints, and as many LoRA
    hot-loads, each on an idle server of its own."""
    from coevolve.config import load_config
    from coevolve.llm.vllm_server import policy_server

    with policy_server(config, log=work / "full.log") as full_ready:
        last = max(i for i, arm in enumerate(alternating(args.repeats)) if arm == "served")
        checkpoints = sorted((work / f"run=served-{last}" / "checkpoints").glob("round=*"))
        full = time_syncs(url, config.model.name, checkpoints[-2:], args.syncs)
    lora = load_config(Path(args.config), [*args.overrides, f"model.servers=[{url}]",
                                           f"train.lora_rank={args.lora_rank}"])  # fmt: skip
    adapter = lora_adapter(config.model.name, args.lora_rank, work / "adapter")
    with policy_server(lora, log=work / "lora.log") as lora_ready:
        hot = time_syncs(url, config.model.name, [adapter], args.syncs)
    return {"full-weight sync (mean)": figure(sum(full) / len(full), "s"), "full-weight sync (max)": figure(max(full), "s"),
            f"LoRA rank {args.lora_rank} hot-load (mean)": figure(sum(hot) / len(hot), "s"),
            f"LoRA rank {args.lora_rank} hot-load (max)": figure(max(hot), "s"),
            "server start to first answer (full-weight server)": figure(full_ready, "s"),
            "server start to first answer (LoRA server)": figure(lora_ready, "s")}  # fmt: skip


def mean_rounds(runs: list[dict[int, dict[str, float]]]) -> dict[int, dict[str, float]]:
    """Per round, the mean of each figure over `runs` (the rounds all of them have)."""
    rounds = set.intersection(*(set(r) for r in runs))
    return {r: {k: sum(run[r][k] for run in runs) / len(runs) for k in ("tokens_per_second", "wall_s")}
            for r in sorted(rounds)}  # fmt: skip


def alternating(repeats: int) -> list[str]:
    """The arms' order: in process, served, served, in process, ... (`repeats` of each)."""
    return [arm for i in range(repeats) for arm in (("local", "served") if i % 2 == 0 else ("served", "local"))]


def main(argv: Sequence[str] | None = None) -> None:
    from coevolve.config import load_config
    from coevolve.llm.vllm_server import policy_server

    parser = argument_parser("vllm-rollout", __doc__)
    parser.add_argument("--config", default="configs/toolworld-smollm2.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each arm, alternating")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="a config override for both arms (repeatable)")
    parser.add_argument("--syncs", type=int, default=3, help="timed weight syncs of each kind (0: none)")
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--note", default="", help="added to the recorded note (e.g. what else the machine ran)")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="vllm-rollout-"))
    print(f"storage root and server logs: {work}", flush=True)
    url = f"http://127.0.0.1:{free_port()}/v1"
    served = [*args.overrides, f"model.servers=[{url}]", "train.lora_rank=0"]
    config = load_config(Path(args.config), served)

    runs: dict[str, list] = {"local": [], "served": []}
    counters: list[dict[str, float]] = []
    for i, arm in enumerate(alternating(args.repeats)):
        name = f"{arm}-{i}"
        if arm == "local":
            print("in process", flush=True)
            runs["local"].append(run_demo(args.config, work, name, args.rounds, args.overrides))
            continue
        print("served by vLLM", flush=True)
        with policy_server(config, log=work / f"{name}.log") as ready:
            before = server_counters(url)
            runs["served"].append(run_demo(args.config, work, name, args.rounds, served))
            after = server_counters(url)
            counters.append({k: after[k] - before[k] for k in COUNTERS} | {"ready": ready})
    syncs = time_both_syncs(args, config, url, work) if args.syncs else {}

    local, remote = mean_rounds(runs["local"]), mean_rounds(runs["served"])
    figures = {}
    for r in sorted(local):
        a, b = local[r], remote[r]
        figures |= {f"round {r} rollout, in process": figure(a["tokens_per_second"], "tokens/s"),
                    f"round {r} rollout, vLLM server": figure(b["tokens_per_second"], "tokens/s"),
                    f"round {r} rollout speed, vLLM / in process": figure(b["tokens_per_second"] / a["tokens_per_second"], "x"),
                    f"round {r} wall time, in process": figure(a["wall_s"], "s"),
                    f"round {r} wall time, vLLM server": figure(b["wall_s"], "s"),
                    f"round {r} wall time, in process / vLLM": figure(a["wall_s"] / b["wall_s"], "x")}  # fmt: skip
    total = {k: sum(c[k] for c in counters) for k in COUNTERS}
    figures |= {"prefix-cache hit rate (served runs)": figure(100 * total["prefix_cache_hits_total"]
                                                              / max(1.0, total["prefix_cache_queries_total"]), "%"),
                "tokens per engine step (served runs, mean)": figure(total["iteration_tokens_total_sum"]
                                                                     / max(1.0, total["iteration_tokens_total_count"]), ""),
                "server start to first answer (served runs, mean)": figure(
                    sum(c["ready"] for c in counters) / len(counters), "s"),
                **syncs,
                "load average (1 min) at the start": figure(load_start, ""),
                "load average (1 min) at the end": figure(os.getloadavg()[0], "")}  # fmt: skip
    for name, value in figures.items():
        print(f"{name:<55} {value['value']:>10} {value['unit']}")
    overrides = f" ({', '.join(args.overrides)})" if args.overrides else ""
    note = (f"{args.config}{overrides}, {args.rounds} rounds in process and with model.servers, {args.repeats} "
            "run(s) of each, alternating (vLLM 0.32 CPU build, float32, eager); full weights synced after every "
            "update" + (f"; {args.note}" if args.note else ""))  # fmt: skip
    record_result("vllm-rollout", figures, command=command_line("vllm-rollout", argv), note=note)


if __name__ == "__main__":
    main()
