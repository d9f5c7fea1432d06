"""Zero-shot success of a model on environment splits, through the real agent loop.

    coevolve bench zero-shot --model smollm2-135m --splits test heldout-templates
    coevolve bench zero-shot --env bfcl --splits ae-test test --max-tasks 30 --max-new-tokens 128 \
        --max-replies 8 --max-context-tokens 4096

Prints per split: success rate, mean reward, format rate (share of replies with a well-formed call),
and per-family success, plus generation throughput. Used to keep the demo config in a learnable regime
(the GRPO-loop issue asks for 5-60 % on `test`). Success, mean reward and format rate per split go to
`benchmarks/results/zero-shot.jsonl`, one variant per environment.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence

from coevolve import envs
from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("zero-shot", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="toolworld")
    parser.add_argument("--splits", nargs="+", default=["test", "heldout-templates"])
    parser.add_argument("--max-tasks", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--samples", type=int, default=1, help="episodes per task")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-replies", type=int, default=6)
    parser.add_argument("--max-context-tokens", type=int, default=2048,
                        help="episode context cap (BFCL's system prompt with its tool docs needs 4096)")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)

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
    figures = {}
    for split, got in results.items():
        figures |= {f"{split} success": figure(100 * got["success"], "%"),
                    f"{split} mean reward": figure(got["mean_reward"], ""),
                    f"{split} replies with a well-formed call": figure(100 * got["call_format_rate"], "%")}  # fmt: skip
    record_result("zero-shot", figures, command=command_line("zero-shot", argv), variant=args.env)


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
