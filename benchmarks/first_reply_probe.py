"""Prompt probe: how often a model's first reply is a well-formed, right, exact tool call.

    coevolve bench first-reply-probe --model smollm2-135m --tasks 32

Compares prompt variants on the first `--tasks` tool-world `test` tasks (greedy and T = 0.7): tool
results rendered Qwen-style (`<tool_response>` in a user turn) or as plain `tool` turns, fixed
demonstrations (bank, messages) or demonstrations from the task's own apps, full exchanges or call turns
only. Used to choose the shipped prompt. The counts (well-formed, right tool, exact first call, of
`--tasks`) go to `benchmarks/results/first-reply-probe.jsonl`.
"""

from __future__ import annotations

from collections.abc import Sequence

from coevolve import envs
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.envs.toolworld.demonstrations import demonstrations
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model
from coevolve.llm.toolcalls import parse_tool_calls


def calls_only(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m["role"] == "user" or (m["role"] == "assistant" and "<tool_call>" in m["content"])]


VARIANTS = {
    "fixed demos, <tool_response> user turns": (True, lambda env, task: demonstrations(env._catalog)),
    "fixed demos, tool turns": (False, lambda env, task: demonstrations(env._catalog)),
    "task-app demos, tool turns (shipped)": (False, lambda env, task: env.demonstrations()),
    "task-app demos, call turns only": (False, lambda env, task: calls_only(env.demonstrations())),
}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("first-reply-probe", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", type=int, default=32)
    args = parser.parse_args(argv)
    model, tokenizer = load_model(args.model)
    engine = HfEngine(model, tokenizer, batch_size=32)
    tasks = envs.make("toolworld").tasks("test")[: args.tasks]
    figures = {}
    for name, (wrap, demos) in VARIANTS.items():
        chat = ChatFormat(tokenizer)
        chat.wrap_tool_results = wrap
        prompts, offered = [], []
        for task in tasks:
            env = envs.make("toolworld")
            obs = env.reset(task)
            prompts.append(chat.prompt_ids(obs.messages, tools=obs.tools, demonstrations=demos(env, task)))
            offered.append({t["function"]["name"] for t in obs.tools})
        for sampling in (SamplingParams(greedy=True, max_new_tokens=60),
                         SamplingParams(temperature=0.7, max_new_tokens=60, seed=1)):
            replies = [parse_tool_calls(c.text) for c in engine.generate(prompts, sampling)]
            well_formed = sum(bool(r.calls) for r in replies)
            right = sum(bool(r.calls) and r.calls[0].name in o for r, o in zip(replies, offered, strict=True))
            exact = sum(bool(r.calls) and r.calls[0] == t.solution[0][0] for r, t in zip(replies, tasks, strict=True))
            mode = "greedy" if sampling.greedy else "T=0.7"
            print(f"{name:42s} {mode:6s} format {well_formed}/{len(tasks)} right tool {right}/{len(tasks)} "
                  f"exact first call {exact}/{len(tasks)} (prompt {len(prompts[0])} tokens)")
            for measure, count in (("format", well_formed), ("right tool", right), ("exact", exact)):
                figures[f"{name}, {mode}, {measure}"] = figure(count, f"of {len(tasks)}")
    record_result("first-reply-probe", figures, command=command_line("first-reply-probe", argv))


if __name__ == "__main__":
    main()
