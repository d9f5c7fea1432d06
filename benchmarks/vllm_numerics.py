"""How far vLLM's sampling log-probs are from the trainer's: the importance ratio of served RL, per dtype.

    coevolve bench vllm-numerics                                   # float32 and bfloat16, SmolLM2
    coevolve bench vllm-numerics --dtypes float32 --tasks 8        # a bigger float32 batch

For each dtype a vLLM server (the command `coevolve engine serve` runs, from `.venv-vllm`) serves the
config's model in that dtype, and a batch of tool-world episodes is sampled through it with the agent
loop and the config's rollout settings (token ids in, sampled ids and their log-probs out). The trainer
then recomputes the log-prob of every sampled token with `rl.logprobs.token_logprobs`, the function the
update uses, in the same dtype and in float32. Per policy token, log ratio = trainer - sampler; reported
are the mean and max |log ratio| and the share of tokens whose ratio exp(log ratio) lies outside the PPO
clip [1 - clip_low, 1 + clip_high] of the config (`train.clip_low`, `train.clip_high`).

bfloat16 is what a GPU user would serve and train in; vLLM's CPU build runs it without native bf16
matmuls on an AVX2 machine, slowly, so its batch is small (`--bf16-tasks`, `--bf16-replies`).
What the update does with a mismatch: docs/reproduce.md ("Numerics: sampler against trainer").
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.processes import free_port


def ratio_stats(trainer: torch.Tensor, sampler: torch.Tensor, clip_low: float, clip_high: float) -> dict:
    """Importance-ratio statistics of policy tokens whose log-probs are `trainer` and `sampler` ([N])."""
    log_ratio = trainer.double() - sampler.double()
    ratio = log_ratio.exp()
    beyond = (ratio < 1 - clip_low) | (ratio > 1 + clip_high)
    return {"mean_abs": float(log_ratio.abs().mean()), "max_abs": float(log_ratio.abs().max()),
            "mean": float(log_ratio.mean()), "beyond_clip": float(beyond.double().mean()),
            "tokens": int(log_ratio.numel())}  # fmt: skip


def sample_episodes(config, tasks: int, replies: int, log: Path) -> list:
    """Episodes of the first `tasks` training tasks x `rollout.k`, sampled by a vLLM server for `config`."""
    from coevolve import envs
    from coevolve.agents.episodes import EpisodeLimits, run_episodes
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.engine import SamplingParams
    from coevolve.llm.models import load_model
    from coevolve.llm.openai_engine import OpenAIEngine
    from coevolve.llm.vllm_server import policy_server

    cfg = config.rollout
    make_env = lambda: envs.make(config.env.name, **config.env.options)  # noqa: E731
    chosen = make_env().tasks("train")[:tasks]
    _, tokenizer = load_model(config.model.name)
    sampling = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, seed=0)
    with policy_server(config, log=log) as ready:
        print(f"  {config.model.dtype} server answered after {ready:.0f} s", flush=True)
        engine = OpenAIEngine(config.model.servers, config.model.served_name or config.model.name,
                              tokenizer=tokenizer, version="bench")  # fmt: skip
        started = time.perf_counter()
        episodes = run_episodes(engine, ChatFormat(tokenizer), make_env, [(t, k) for t in chosen for k in range(cfg.k)],
                                sampling, EpisodeLimits(replies, cfg.max_context_tokens), seed=0)  # fmt: skip
        seconds = time.perf_counter() - started
    tokens = sum(ep.completion_tokens for ep in episodes)
    print(f"  sampled {len(episodes)} episodes, {tokens} tokens in {seconds:.0f} s", flush=True)
    return [ep for ep in episodes if ep.completion_tokens]


def trainer_logprobs(model_name: str, dtype: str, episodes: list, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(trainer, sampler) log-probs of every policy token of `episodes`, the trainer in `dtype`."""
    from coevolve.llm.models import load_model
    from coevolve.rl.logprobs import token_logprobs

    model, _ = load_model(model_name, dtype=dtype)
    ours, theirs = [], []
    for ep in episodes:
        ids = torch.tensor([ep.input_ids])
        mask = torch.tensor([ep.loss_mask]).bool()
        with torch.no_grad():
            lp = token_logprobs(model, ids, torch.ones_like(ids), temperature=temperature, score_mask=mask)
        ours.append(lp[mask].float())
        theirs.append(torch.tensor([ep.logprobs])[mask].float())
    return torch.cat(ours), torch.cat(theirs)


def main(argv: Sequence[str] | None = None) -> None:
    from coevolve.config import load_config

    parser = argument_parser("vllm-numerics", __doc__)
    parser.add_argument("--config", default="configs/toolworld-smollm2.yaml")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--tasks", type=int, default=4, help="training tasks per float32 batch (x rollout.k)")
    parser.add_argument("--replies", type=int, default=None, help="replies per episode (default rollout.max_replies)")
    parser.add_argument("--bf16-tasks", type=int, default=2, help="tasks of a bfloat16 batch (x rollout.k)")
    parser.add_argument("--bf16-replies", type=int, default=2, help="replies per bfloat16 episode")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer's recomputation")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    figures, work = {}, Path(tempfile.mkdtemp(prefix="vllm-numerics-"))
    for dtype in args.dtypes:
        low = dtype == "bfloat16"
        config = load_config(Path(args.config), [f"model.dtype={dtype}", f"model.servers=[http://127.0.0.1:{free_port()}/v1]",
                                                 "train.lora_rank=0"])  # fmt: skip
        print(f"{dtype}: sampling through vLLM", flush=True)
        replies = args.bf16_replies if low else (args.replies or config.rollout.max_replies)
        episodes = sample_episodes(config, args.bf16_tasks if low else args.tasks, replies, work / f"{dtype}.log")
        trainers = [dtype] if dtype == "float32" else [dtype, "float32"]
        for trainer in trainers:
            ours, theirs = trainer_logprobs(config.model.name, trainer, episodes, config.rollout.temperature)
            stats = ratio_stats(ours, theirs, config.train.clip_low, config.train.clip_high)
            label = f"{dtype} server, {trainer} trainer"
            print(f"  {label}: {stats['tokens']} tokens, mean |log ratio| {stats['mean_abs']:.2e}, max "
                  f"{stats['max_abs']:.2e}, beyond the clip {100 * stats['beyond_clip']:.2f} %", flush=True)
            figures |= {f"{label}: mean |log ratio|": figure(stats["mean_abs"], ""),
                        f"{label}: max |log ratio|": figure(stats["max_abs"], ""),
                        f"{label}: tokens beyond the clip": figure(100 * stats["beyond_clip"], "%"),
                        f"{label}: policy tokens": figure(stats["tokens"], "")}  # fmt: skip
    figures["load average (1 min) at the start"] = figure(load, "")
    figures["load average (1 min) at the end"] = figure(os.getloadavg()[0], "")
    note = (f"vLLM 0.32 CPU build (.venv-vllm), {args.config}; float32 batch: {args.tasks} tasks x k, "
            f"bfloat16 batch: {args.bf16_tasks} task(s) x k, {args.bf16_replies} reply each")
    print(f"server logs: {work}")
    record_result("vllm-numerics", figures, command=command_line("vllm-numerics", argv), note=note)


if __name__ == "__main__":
    main()
