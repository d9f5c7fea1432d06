"""Build (once) a warm-started copy of a config's policy: `rl.warm_start` on fresh training-family tasks.

    from stages.warm_start import warm_start_checkpoint
    path = warm_start_checkpoint(config, WarmStart(tasks=48), root / "warm-start")
    # then run with model.name=<path>

The reference episodes come from the config's environment drawn with another seed (the environment's
`seed` option + 1,000,003 + settings.seed) from its `train` split; any task whose id is in one of the
run's own splits is skipped, so no evaluation task is ever seen. The checkpoint directory is named by a
hash of (model, environment, settings) and holds the weights, the tokenizer and `warm_start.json` (the
settings, task ids and losses); an existing complete one is reused.

With `settings.teacher` the same tasks also give one abstraction example each (`abstraction_sample`): the
in-process teacher is the policy, and SmolLM2 answers the abstraction prompt by copying its example
(benchmarks/RESULTS.md), so it learns the reply from tasks whose answer is known.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import envs
from envs.base import Environment, Task, content_hash
from llm.chat import ChatFormat
from rl.warm_start import WarmStart, as_batch, reference_sample, warm_start
from stages.abstract import Group, abstract_messages
from stages.config import CoevolveConfig
from stages.teacher import ABSTRACT_PREFIX

SEED_OFFSET = 1_000_003
RECORD = "warm_start.json"


def warm_start_key(config: CoevolveConfig, settings: WarmStart) -> str:
    return content_hash({"model": config.model.name, "dtype": config.model.dtype, "env": config.env.name,
                         "options": config.env.options, "settings": asdict(settings),
                         "max_tasks": config.evolve.max_tasks_per_group}, length=12)  # fmt: skip


def warm_start_tasks(config: CoevolveConfig, settings: WarmStart) -> list[Task]:
    """`settings.tasks` training-family tasks that none of the run's splits contains."""
    options = dict(config.env.options)
    run_env = envs.make(config.env.name, **options)
    taken = {task.id for split in run_env.splits() for task in run_env.tasks(split)}
    options["seed"] = int(options.get("seed", 0)) + SEED_OFFSET + settings.seed
    try:
        source = envs.make(config.env.name, **options)
    except TypeError as exc:
        raise ValueError(
            f"warm start draws fresh tasks through the environment's `seed` option; {config.env.name!r} has none"
        ) from exc
    fresh = [task for task in source.tasks("train") if task.id not in taken]
    if len(fresh) < settings.tasks:
        raise ValueError(f"warm start: asked for {settings.tasks} tasks, the environment yields {len(fresh)}")
    return fresh[: settings.tasks]


def abstraction_sample(env: Environment, chat: ChatFormat, task: Task, max_tasks: int) -> tuple[list[int], list[int]]:
    """The teacher's abstraction prompt (`stages.abstract`) for `task`'s reference calls, as an exploration
    would have observed them, answered with the task itself: its calls, answers, user turns and family.
    Ids and loss mask, the reply prefilled with `ABSTRACT_PREFIX` like at inference (`EngineTeacher`)."""
    tools = env.reset(task).tools
    calls = []
    for call in [call for turn in task.solution or [] for call in turn]:
        (ran,) = env.step([call]).info["calls"]
        observation = ran.get("result") if ran.get("ok") else ran.get("error")
        text = observation if isinstance(observation, str) else json.dumps(observation, default=str)
        calls.append({"tool": call.name, "arguments": call.arguments, "observation": text})
    group = Group(group_id="warm-start", exploration_id="warm-start", task=task, calls=calls)
    answers = [str(value) for turn in task.checker.get("answers") or [] for value in turn]
    reply = json.dumps([{"solution": list(range(len(calls))), "answers": answers, "query": " ".join(task.turns),
                         "intent": task.family.replace("_", " ")}])  # fmt: skip
    if not reply.startswith(ABSTRACT_PREFIX):
        raise AssertionError(f"the abstraction reply must start with {ABSTRACT_PREFIX!r}")
    prompt = chat.prompt_ids(abstract_messages(group, tools, max_tasks), tools=[]) + chat.encode(ABSTRACT_PREFIX)
    target = chat.encode(reply[len(ABSTRACT_PREFIX):]) + [chat.end_of_turn_id]
    return prompt + target, [0] * len(prompt) + [1] * len(target)


def warm_start_checkpoint(config: CoevolveConfig, settings: WarmStart, directory: Path) -> Path:
    """The warm-started checkpoint of `config`'s policy under `directory`, built if missing."""
    import torch

    from llm.models import load_model

    target = Path(directory) / warm_start_key(config, settings)
    if (target / RECORD).is_file():
        return target
    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    model, tokenizer = load_model(config.model.name, dtype=config.model.dtype, device=config.model.device)
    tasks = warm_start_tasks(config, settings)
    env, chat = envs.make(config.env.name, **config.env.options), ChatFormat(tokenizer)
    rows = [reference_sample(env, chat, task) for task in tasks]
    groups = [("agent", task.family) for task in tasks]
    if settings.teacher:
        rows += [abstraction_sample(env, chat, task, config.evolve.max_tasks_per_group) for task in tasks]
        groups += [("abstract", task.family) for task in tasks]
    samples = as_batch(rows, groups)
    print(f"warm start: {len(rows)} examples ({len(tasks)} tasks), {settings.epochs} epochs",
          file=sys.stderr, flush=True)  # fmt: skip

    def report(step: int, steps: int, loss: float) -> None:
        print(f"  step {step}/{steps}: loss {loss:.3f}", file=sys.stderr, flush=True)

    losses = warm_start(model, samples, settings, progress=report)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {"base_model": config.model.name, "settings": asdict(settings), "examples": len(rows),
              "task_ids": [t.id for t in tasks],
              "families": sorted({t.family for t in tasks}), "losses": losses,
              "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target
