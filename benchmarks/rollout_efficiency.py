"""Rollout efficiency: the multi-turn agent loop's generated tokens/s against one batched generate call.

    coevolve bench rollout-efficiency --model smollm2-135m --tasks 4 --k 8

Both sides use the same model, engine and batch size in the same process. The baseline is one
`HfEngine.generate` call over the same initial prompts that produces the same number of tokens per
sequence with stop tokens disabled, i.e. pure batched decoding with no environment, no turns and no
re-prefill. The ratio (loop tokens/s / baseline tokens/s) is what the GRPO-loop issue asks to keep
>= 0.7; it goes to `benchmarks/results/rollout-efficiency.jsonl` with both rates and the prefill tokens
per episode over the final context length.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from coevolve import envs
from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model


class NeverStops(HfEngine):
    """The baseline engine: decodes exactly max_new_tokens per prompt (no end-of-turn stop)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.eos_ids = (-1,)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("rollout-efficiency", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-replies", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-prompt-sharing", action="store_true",
                        help="prefill every copy of a group's prompt (the engine before group KV sharing)")
    args = parser.parse_args(argv)
    share = not args.no_prompt_sharing

    model, tokenizer = load_model(args.model)
    chat = ChatFormat(tokenizer)
    env = envs.make("toolworld")
    tasks = env.tasks("train")[: args.tasks]
    jobs = [(t, k) for t in tasks for k in range(args.k)]
    sampling = SamplingParams(temperature=0.8, max_new_tokens=args.max_new_tokens, seed=0)
    engine = HfEngine(model, tokenizer, batch_size=args.batch_size, share_prompts=share)
    engine.generate([chat.prompt_ids([{"role": "user", "content": "hi"}], tools=[])], sampling)  # warm-up

    engine.prefill_tokens = 0
    started = time.perf_counter()
    episodes = run_episodes(engine, chat, lambda: envs.make("toolworld"), jobs, sampling,
                            EpisodeLimits(args.max_replies, 4096))
    loop_seconds = time.perf_counter() - started
    prefill_ratio = engine.prefill_tokens / sum(len(ep.input_ids) for ep in episodes)
    loop_tokens = sum(ep.completion_tokens for ep in episodes)

    prompts = [ep.input_ids[: ep.prompt_tokens] for ep in episodes]
    per_sequence = max(1, round(loop_tokens / len(prompts)))
    baseline = NeverStops(model, tokenizer, batch_size=args.batch_size, share_prompts=share)
    started = time.perf_counter()
    out = baseline.generate(prompts, SamplingParams(temperature=0.8, max_new_tokens=per_sequence, seed=0))
    base_seconds = time.perf_counter() - started
    base_tokens = sum(len(c.token_ids) for c in out)

    loop_rate, base_rate = loop_tokens / loop_seconds, base_tokens / base_seconds
    print(f"model {args.model}, {len(jobs)} episodes ({args.tasks} tasks x {args.k}), batch {args.batch_size}")
    print(f"agent loop: {loop_tokens} tokens in {loop_seconds:.1f} s = {loop_rate:.1f} tok/s "
          f"({sum(ep.replies for ep in episodes)} replies, mean prompt {sum(map(len, prompts)) / len(prompts):.0f} tokens)")
    print(f"one batched generate: {base_tokens} tokens in {base_seconds:.1f} s = {base_rate:.1f} tok/s")
    print(f"ratio: {loop_rate / base_rate:.2f}")
    print(f"prefill tokens per episode / final context length: {prefill_ratio:.2f} (KV reuse across turns"
          f"{', group prompts prefilled once' if share else ''})")
    figures = {"agent loop": figure(loop_rate, "tokens/s"), "one batched generate": figure(base_rate, "tokens/s"),
               "ratio": figure(loop_rate / base_rate, "x"),
               "prefill per episode / final context": figure(prefill_ratio, "x")}  # fmt: skip
    record_result("rollout-efficiency", figures, command=command_line("rollout-efficiency", argv),
                  variant="" if share else "no prompt sharing")  # fmt: skip


if __name__ == "__main__":
    main()
