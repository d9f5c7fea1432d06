"""Zero-shot success of a model on environment splits, through the real agent loop.

    .venv/bin/python benchmarks/zero_shot.py --model smollm2-135m --splits test heldout-templates

Prints per split: success rate, mean reward, format rate (share of replies with a well-formed call),
and per-family success, plus generation throughput. Used to keep the demo config in a learnable regime
(the GRPO-loop issue asks for 5-60 % on `test`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from coevolve import envs
from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="toolworld")
    parser.add_argument("--splits", nargs="+", default=["test", "heldout-templates"])
    parser.add_argument("--max-tasks", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--samples", type=int, default=1, help="episodes per task")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-replies", type=int, default=6)
    parser.add_argument("--max-context-tokens", type=int, default=2048,
                        help="episode context cap (BFCL prompts alone are 1.1k-2.2k tokens: use 4096)")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    model, tokenizer = load_model(args.model)
    engine, chat = HfEngine(model, tokenizer, batch_size=args.batch_size), ChatFormat(tokenizer)
    greedy = args.temperature == 0
    sampling = SamplingParams(temperature=1.0 if greedy else args.temperature, greedy=greedy,
                              max_new_tokens=args.max_new_tokens, seed=0)
    env = envs.make(args.env)
    results = {}
    for split in args.splits:
        tasks = env.tasks(split)[: args.max_tasks]
        jobs = [(t, k) for t in tasks for k in range(args.samples)]
        started = time.perf_counter()
        episodes = run_episodes(engine, chat, lambda: envs.make(args.env), jobs, sampling,
                                EpisodeLimits(args.max_replies, args.max_context_tokens))
        seconds = time.perf_counter() - started
        results[split] = summarise(episodes, seconds)
        print(json.dumps({"split": split, **results[split]}, indent=1))


def summarise(episodes, seconds: float) -> dict:
    by_family = defaultdict(list)
    for ep in episodes:
        by_family[ep.task.family].append(ep.evaluation.success)
    replies = [s for ep in episodes for s in ep.steps if s["call_index"] == 0]
    well_formed = [s for s in replies if s["kind"] == "call"]
    tokens = sum(ep.completion_tokens for ep in episodes)
    return {
        "episodes": len(episodes),
        "success": round(sum(ep.evaluation.success for ep in episodes) / len(episodes), 4),
        "mean_reward": round(sum(ep.evaluation.reward for ep in episodes) / len(episodes), 4),
        "call_format_rate": round(len(well_formed) / max(len(replies), 1), 4),
        "tool_ok_rate": round(sum(s["ok"] for s in well_formed) / max(len(well_formed), 1), 4),
        "finish": {f: sum(ep.finish == f for ep in episodes) for f in {ep.finish for ep in episodes}},
        "by_family": {f: round(sum(v) / len(v), 2) for f, v in sorted(by_family.items())},
        "generated_tokens": tokens,
        "seconds": round(seconds, 1),
        "tokens_per_second": round(tokens / seconds, 1),
    }


if __name__ == "__main__":
    main()
