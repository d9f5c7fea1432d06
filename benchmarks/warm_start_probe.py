"""How much a warm start helps: build (or reuse) the warm-started checkpoint of a config, then sample K
episodes on N of its `train` tasks and report success per family and how many groups hold both outcomes
(the groups that give GRPO a gradient and fire boundary signals); the same, and the build time of a
checkpoint built now, go to `benchmarks/results/warm-start-probe.jsonl`.

    coevolve bench warm-start-probe --tasks 16 --k 4 [--warm-start-tasks 48] [--no-teacher]
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from coevolve import envs
from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.config import load_config
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import cache_dir, load_model
from coevolve.rl.warm_start import WarmStart
from coevolve.stages.warm_start.build import warm_start_checkpoint, warm_start_key


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("warm-start-probe", __doc__)
    parser.add_argument("--config", type=Path, default=Path("configs/learning-smollm2.yaml"))
    parser.add_argument("--warm-start-tasks", type=int, default=WarmStart.tasks)
    parser.add_argument("--no-teacher", action="store_true", help="agent episodes only")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--out", type=Path, default=cache_dir() / "warm-start")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    started = time.perf_counter()
    settings = WarmStart(tasks=args.warm_start_tasks, teacher=not args.no_teacher)
    built = not (args.out / warm_start_key(config, settings)).exists()
    path = warm_start_checkpoint(config, settings, args.out)
    build_s = time.perf_counter() - started
    print(f"checkpoint {path} ({build_s:.1f} s{'' if built else ', built before'})")

    model, tokenizer = load_model(str(path))
    engine = HfEngine(model, tokenizer, batch_size=config.model.generation_batch_size)
    rollout = config.rollout
    make_env = lambda: envs.make(config.env.name, **config.env.options)  # noqa: E731
    tasks = random.Random(1).sample(make_env().tasks("train"), args.tasks)
    started = time.perf_counter()
    episodes = run_episodes(engine, ChatFormat(tokenizer), make_env, [(t, s) for t in tasks for s in range(args.k)],
                            SamplingParams(temperature=rollout.temperature, max_new_tokens=rollout.max_new_tokens,
                                           seed=0),
                            EpisodeLimits(rollout.max_replies, rollout.max_context_tokens))  # fmt: skip
    print(f"{len(episodes)} episodes in {time.perf_counter() - started:.1f} s")
    by_family, by_task = defaultdict(list), defaultdict(list)
    for ep in episodes:
        by_family[ep.task.family].append(ep.evaluation.success)
        by_task[ep.task.id].append(ep.evaluation.success)
    for family, outcomes in sorted(by_family.items()):
        print(f"  {family:24s} {sum(outcomes)}/{len(outcomes)}")
    solved = sum(sum(v) for v in by_task.values())
    mixed = sum(1 for v in by_task.values() if any(v) and not all(v))
    print(f"train success {solved}/{len(episodes)}; groups with both outcomes {mixed}/{len(by_task)}")
    figures = {"train success": figure(100 * solved / len(episodes), "%"),
               "groups with both outcomes": figure(mixed, f"of {len(by_task)}"),
               **({"build": figure(build_s, "s")} if built else {})}  # fmt: skip
    record_result("warm-start-probe", figures, command=command_line("warm-start-probe", argv),
                  variant="agent episodes only" if args.no_teacher else "")  # fmt: skip


if __name__ == "__main__":
    main()
