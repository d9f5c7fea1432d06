"""How often a small in-process teacher answers the reflection prompt with usable JSON, with and without
starting its reply with `prompts.REFLECT_PREFIX` (assistant prefill).

    coevolve bench teacher-prefill-probe --model smollm2-135m --tasks 16

Each probe is a real reflection prompt (`stages.explore.exploration.reflection_messages`) for a `train` task of
the tool world, with a one-step failed trajectory (a call to an unknown tool, as SmolLM2 makes them),
sampled at the teacher's default temperature; the reply goes through the real parser (`parse_context`).
The replies parsed into an exploration context, by status, go to
`benchmarks/results/teacher-prefill-probe.jsonl`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from coevolve import envs
from coevolve.agents.teacher import EngineTeacher, TeacherSettings
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.llm.chat import ChatFormat
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model
from coevolve.stages.explore.exploration import Target, parse_context, reflection_messages
from coevolve.stages.explore.prompting import REFLECT_PREFIX

FAILED_STEP = {"step": 0, "call_index": 0, "kind": "call", "tool": "balance", "arguments": "{}", "ok": False,
               "observation": 'unknown tool "balance"', "reply": ""}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("teacher-prefill-probe", __doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args(argv)

    model, tokenizer = load_model(args.model)
    settings = TeacherSettings(args.temperature, args.max_new_tokens, 64, 4096)
    teacher = EngineTeacher(args.model, HfEngine(model, tokenizer), ChatFormat(tokenizer), settings)
    env = envs.make("toolworld")
    conversations, names = [], []
    for task in env.tasks("train")[: args.tasks]:
        tools = env.reset(task).tools
        target = Target("probe", task, "rare", steps=[FAILED_STEP], outcome="reward 0.10, failure")
        conversations.append(reflection_messages(target, tools))
        names.append({t["function"]["name"] for t in tools})
    sampling = settings.text_sampling(seed=0)
    figures = {}
    for label, prefix in (("no prefill", ""), ("prefill", REFLECT_PREFIX)):
        replies = teacher.complete(conversations, sampling, reply_prefix=prefix)
        statuses = Counter(parse_context(reply, n)[1] for reply, n in zip(replies, names, strict=True))
        print(f"{label:<11} ok {statuses['ok']}/{len(replies)}  {dict(statuses)}", flush=True)
        figures |= {f"{label}, {status}": figure(n, f"of {len(replies)}") for status, n in sorted(statuses.items())}
    record_result("teacher-prefill-probe", figures, command=command_line("teacher-prefill-probe", argv))


if __name__ == "__main__":
    main()
