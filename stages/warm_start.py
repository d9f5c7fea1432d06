"""Build (once) a warm-started copy of a config's policy: `rl.warm_start` on fresh training-family tasks.

    from stages.warm_start import warm_start_checkpoint
    path = warm_start_checkpoint(config, WarmStart(tasks=48), root / "warm-start")
    # then run with model.name=<path>

The reference episodes come from the config's environment drawn with another seed (the environment's
`seed` option + 1,000,003 + settings.seed) from its `train` split; any task whose id is in one of the
run's own splits is skipped, so no evaluation task is ever seen. The checkpoint directory is named by a
hash of (model, environment, settings) and holds the weights, the tokenizer and `warm_start.json` (the
settings, task ids and losses); an existing complete one is reused.
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
from envs.base import Task, content_hash
from rl.warm_start import WarmStart, reference_samples, warm_start
from stages.config import CoevolveConfig

SEED_OFFSET = 1_000_003
RECORD = "warm_start.json"


def warm_start_key(config: CoevolveConfig, settings: WarmStart) -> str:
    return content_hash({"model": config.model.name, "dtype": config.model.dtype, "env": config.env.name,
                         "options": config.env.options, "settings": asdict(settings)}, length=12)  # fmt: skip


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


def warm_start_checkpoint(config: CoevolveConfig, settings: WarmStart, directory: Path) -> Path:
    """The warm-started checkpoint of `config`'s policy under `directory`, built if missing."""
    import torch

    from llm.chat import ChatFormat
    from llm.models import load_model

    target = Path(directory) / warm_start_key(config, settings)
    if (target / RECORD).is_file():
        return target
    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    model, tokenizer = load_model(config.model.name, dtype=config.model.dtype, device=config.model.device)
    tasks = warm_start_tasks(config, settings)
    samples = reference_samples(
        envs.make(config.env.name, **config.env.options), ChatFormat(tokenizer), tasks
    )
    print(
        f"warm start: {len(tasks)} reference episodes, {settings.epochs} epochs", file=sys.stderr, flush=True
    )

    def report(step: int, steps: int, loss: float) -> None:
        print(f"  step {step}/{steps}: loss {loss:.3f}", file=sys.stderr, flush=True)

    losses = warm_start(model, samples, settings, progress=report)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {"base_model": config.model.name, "settings": asdict(settings), "task_ids": [t.id for t in tasks],
              "families": sorted({t.family for t in tasks}), "losses": losses,
              "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target
