"""Build (once) a warm-started copy of a config's policy: `rl.warm_start` on fresh training-family tasks.

    from coevolve.stages.warm_start.build import warm_start_checkpoint
    path = warm_start_checkpoint(config, WarmStart(tasks=48), root / "warm-start")
    # then run with model.name=<path>

The reference episodes come from the config's environment drawn with another seed (the environment's
`seed` option + 1,000,003 + settings.seed) from its `train` split; any task whose id is in one of the
run's own splits is skipped, so no evaluation task is ever seen. The checkpoint directory is named by a
hash of (model, environment, settings) and holds the weights, the tokenizer and `warm_start.json` (the
settings, task ids and losses); an existing complete one is reused. With `settings.lora_rank` it is
the base merged with a LoRA adapter kept beside it, which can be shipped (`stages.warm_start.adapters`).

With `settings.teacher` the same tasks also give one abstraction example each (`abstraction_sample`): the
in-process teacher is the policy, and a small model answers the abstraction prompt by copying the
example it is shown, so it is taught the reply on tasks whose answer is known. A run's `warm_start`
section names its starts (`with_warm_starts`) and builds those the model cache lacks (`build_warm_starts`):
merged from the shipped adapter of that name when there is one, else trained.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from coevolve import envs
from coevolve.agents.reference import reference_sample
from coevolve.config import CoevolveConfig, LocalTeacherConfig
from coevolve.core import content_hash
from coevolve.envs.base import Task
from coevolve.llm.chat import ChatFormat
from coevolve.llm.models import WARM_STARTS, cache_dir
from coevolve.rl.warm_start import WarmStart, as_batch
from coevolve.stages.warm_start.adapters import (
    RECORD,
    merge_adapter,
    save_start,
    shipped_adapter,
    staging,
    train_start,
)
from coevolve.stages.warm_start.teacher_examples import (
    abstraction_sample,
    exploration_sample,
    named_tool_samples,
    reflection_sample,
)

SEED_OFFSET = 1_000_003
GAP_OPTIONS = ("gap_families", "n_gap_validation", "n_gap_test")
"""Environment options that name the coverage gap's evaluation splits: a start never trains on those
families (`envs.toolworld.tasks.gap_family_errors`), so they leave the starts' keys alone, and an experiment
fixes its gap on validation without building its starts again."""


def start_options(config: CoevolveConfig) -> dict:
    """The environment options a start depends on."""
    return {k: v for k, v in config.env.options.items() if k not in GAP_OPTIONS}


def warm_start_key(config: CoevolveConfig, settings: WarmStart) -> str:
    return content_hash({"model": config.model.name, "dtype": config.model.dtype, "env": config.env.name,
                         "options": start_options(config), "settings": settings.key_fields(),
                         "max_tasks": config.abstract.max_tasks_per_group}, length=12)  # fmt: skip


def warm_start_tasks(config: CoevolveConfig, settings: WarmStart) -> list[Task]:
    """`settings.tasks` training-family tasks that none of the run's splits contains, none sharing a world
    (initial state) with a split the run does not train on: the start never sees what evaluation tests.
    (Measured on every shipped tool-world config: no drawn task shares a world, so the world rule leaves
    their starts as they were built.)"""
    options = dict(config.env.options)
    run_env = envs.make(config.env.name, **options)
    taken = {task.id for split in run_env.splits() for task in run_env.tasks(split)}
    held_out = [split for split in run_env.splits() if split != config.dataset.seed_split]
    worlds = {content_hash(task.initial_state) for split in held_out for task in run_env.tasks(split)}
    options["seed"] = int(options.get("seed", 0)) + SEED_OFFSET + settings.seed
    try:
        source = envs.make(config.env.name, **options)
    except TypeError as exc:
        raise ValueError(
            f"warm start draws fresh tasks through the environment's `seed` option; {config.env.name!r} has none"
        ) from exc
    fresh = [task for task in source.tasks("train")
             if task.id not in taken and content_hash(task.initial_state) not in worlds]  # fmt: skip
    if len(fresh) < settings.tasks:
        raise ValueError(f"warm start: asked for {settings.tasks} tasks, the environment yields {len(fresh)}")
    return fresh[: settings.tasks]


def warm_start_checkpoint(config: CoevolveConfig, settings: WarmStart, directory: Path) -> Path:
    """The warm-started checkpoint of `config`'s policy under `directory`, built if missing."""
    import torch

    from coevolve.llm.models import load_model

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
        rows += [abstraction_sample(env, chat, task, config.abstract.max_tasks_per_group) for task in tasks]
        groups += [("abstract", task.family) for task in tasks]
    samples = as_batch(rows, groups)
    print(f"warm start: {len(rows)} examples ({len(tasks)} tasks), {settings.epochs} epochs",
          file=sys.stderr, flush=True)  # fmt: skip
    tmp = staging(target)
    model, losses = train_start(model, samples, settings, tmp, base=config.model.name, progress=_report)
    record = {"base_model": config.model.name, "settings": asdict(settings), "examples": len(rows),
              "task_ids": [t.id for t in tasks],
              "families": sorted({t.family for t in tasks}), "losses": losses,
              "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    return save_start(model, tokenizer, record, tmp, target)


MAX_DISTRACTORS = 3
"""Most distractor calls in a teacher abstraction example (`teacher_checkpoint` draws 0 to this many)."""


def teacher_key(config: CoevolveConfig, start: Path | str, settings: WarmStart, *,
                max_distractors: int = MAX_DISTRACTORS) -> str:  # fmt: skip
    """The directory name of `teacher_checkpoint`'s checkpoint: what it is trained from and on. A `start`
    built by this module is named by its own content key, which stands for it: the teacher built on a
    storage root's warm start keeps its key when the root moves or is copied."""
    return _teacher_key(config, _start_name(start), settings, max_distractors)


def _start_name(start: Path | str) -> str:
    """A start this module builds by its content key (its folder's name), whether it is built yet or only
    named (a report of stored runs on a storage root without the starts); anything else as given."""
    path = Path(start)
    return path.name if (path / RECORD).is_file() or path.parent.name == WARM_STARTS else str(start)


def _teacher_key(config: CoevolveConfig, start: str, settings: WarmStart, max_distractors: int) -> str:
    """`replies` names the kinds of example; `named-tool` only with `warm_start.teacher_named_tool_examples`,
    so the keys of the starts built without it, and their shipped adapters' names, stay as they were."""
    named = ["named-tool"] if config.warm_start.teacher_named_tool_examples else []
    replies = ["abstract", "reflect", "explore", *named]
    key = content_hash({"start": start, "settings": settings.key_fields(),
                        "max_distractors": max_distractors,
                        "replies": replies,
                        "env": config.env.name, "options": start_options(config),
                        "max_tasks": config.abstract.max_tasks_per_group}, length=12)  # fmt: skip
    return f"teacher-{key}"


def teacher_checkpoint(config: CoevolveConfig, start: Path, settings: WarmStart, directory: Path, *,
                       max_distractors: int = MAX_DISTRACTORS) -> Path:  # fmt: skip
    """A teacher of its own (`teacher.type: local`) under `directory`, built if missing: the checkpoint
    `start` (e.g. the policy's warm start, so the teacher can also act in explorations) fine-tuned on the
    teacher's replies and actions for `settings.tasks` fresh training-family tasks (`settings.seed` picks which:
    use another seed than the policy's warm start): an abstraction example each, with 0 to
    `max_distractors` extra observed calls to leave out (`abstraction_sample`; drawn per example, so the
    solution's indices follow the calls shown, not a fixed offset), a reflection example each
    (`reflection_sample`), an exploration episode each that has a variant to explore
    (`exploration_sample`), and with `warm_start.teacher_named_tool_examples` a reflection and an exploration
    on an unused training tool where the task offers one (`named_tool_rows`)."""
    import torch

    from coevolve.llm.models import load_model

    target = Path(directory) / teacher_key(config, start, settings, max_distractors=max_distractors)
    if (target / RECORD).is_file():
        return target
    started = time.perf_counter()
    torch.manual_seed(settings.seed)
    model, tokenizer = load_model(str(start), dtype=config.model.dtype, device=config.model.device)
    tasks = warm_start_tasks(config, settings)
    env, chat, rng = envs.make(config.env.name, **config.env.options), ChatFormat(tokenizer), random.Random(settings.seed)
    distractors = [rng.randint(0, max_distractors) for _ in tasks]
    rows = [abstraction_sample(env, chat, task, config.abstract.max_tasks_per_group, distractors=n, rng=rng)
            for task, n in zip(tasks, distractors, strict=True)]  # fmt: skip
    rows += [reflection_sample(env, chat, task, rng=rng) for task in tasks]
    groups = [("abstract", t.family) for t in tasks] + [("reflect", t.family) for t in tasks]
    explored = [(task, exploration_sample(env, chat, task, rng=rng)) for task in tasks]
    explored = [(task, row) for task, row in explored if row is not None]
    rows += [row for _, row in explored]
    groups += [("explore", task.family) for task, _ in explored]
    named = named_tool_rows(config, env, chat, tasks, settings.seed)
    rows += [row for _, row in named]
    groups += [group for group, _ in named]
    print(f"teacher warm start: {len(tasks)} abstraction examples (0-{max_distractors} distractor calls), "
          f"{len(tasks)} reflection examples, {len(explored)} exploration examples and {len(named)} named-tool "
          f"examples, {settings.epochs} epochs",
          file=sys.stderr, flush=True)  # fmt: skip
    tmp = staging(target)
    name = _start_name(start)
    base = f"{WARM_STARTS}/{name}" if name != str(start) else name
    model, losses = train_start(model, as_batch(rows, groups), settings, tmp, base=base, progress=_report)
    record = {"start": base, "settings": asdict(settings), "distractors": distractors,
              "examples": len(rows), "explorations": len(explored), "named_tool_examples": len(named),
              "task_ids": [t.id for t in tasks],
              "losses": losses, "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    return save_start(model, tokenizer, record, tmp, target)


def named_tool_rows(config: CoevolveConfig, env, chat: ChatFormat, tasks: list[Task], seed: int) -> list[tuple]:
    """With `warm_start.teacher_named_tool_examples`: ((group, family), example) pairs of a reflection and an
    exploration on an `unused` signal naming a training tool each task does not call (`named_tool_samples`);
    the tools are those the tasks' own references call, so no coverage-gap tool is ever named. Drawn with
    a generator of their own, so the other examples are the same with the option on or off."""
    if not config.warm_start.teacher_named_tool_examples:
        return []
    trained: dict = {}
    for call in (c for task in tasks for turn in task.solution or [] for c in turn):
        trained.setdefault(call.name, call)
    rng, rows = random.Random(f"named-tool:{seed}"), []
    for task in tasks:
        pair = named_tool_samples(env, chat, task, trained, rng=rng)
        if pair:
            rows += [(("reflect-named", task.family), pair[0]), (("explore-named", task.family), pair[1])]
    return rows


def policy_start_settings(config: CoevolveConfig) -> WarmStart:
    section = config.warm_start
    return WarmStart(tasks=section.policy_tasks, epochs=section.epochs, lr=section.lr,
                     lora_rank=section.lora_rank, lora_alpha=section.lora_alpha)  # fmt: skip


def teacher_start_settings(config: CoevolveConfig) -> WarmStart:
    """Other fresh tasks than the policy's (seed 1); the abstraction reply is part of the teacher's own
    examples, not added again."""
    section = config.warm_start
    return WarmStart(tasks=section.teacher_tasks, epochs=section.epochs, lr=section.lr, seed=1, teacher=False,
                     lora_rank=section.lora_rank, lora_alpha=section.lora_alpha)  # fmt: skip


def with_warm_starts(config: CoevolveConfig) -> CoevolveConfig:
    """`config` with its `warm_start` section applied by name, without building anything: `model.name`
    becomes `warm-start/<key>` and the teacher a `local` one, `warm-start/teacher-<key>`. Applying it
    again changes nothing (a name already under `warm-start/` is kept)."""
    section, model, teacher = config.warm_start, config.model, config.teacher
    if section.policy_tasks and not model.name.startswith(f"{WARM_STARTS}/"):
        model = model.model_copy(update={"name": f"{WARM_STARTS}/{warm_start_key(config, policy_start_settings(config))}"})
    if section.teacher_tasks and teacher.type == "policy":
        start = model.name.removeprefix(f"{WARM_STARTS}/")
        key = _teacher_key(config, start, teacher_start_settings(config), MAX_DISTRACTORS)
        sampling = teacher.model_dump(exclude={"type"})
        teacher = LocalTeacherConfig(model=f"{WARM_STARTS}/{key}", dtype=model.dtype, device=model.device, **sampling)
    return config.model_copy(update={"model": model, "teacher": teacher})


def start_paths(spec: CoevolveConfig, named: CoevolveConfig) -> list[Path]:
    """Where the starts `named` (= `with_warm_starts(spec)`) names are in the model cache, policy first."""
    policy = [cache_dir() / named.model.name] if spec.warm_start.policy_tasks else []
    return policy + ([cache_dir() / named.teacher.model] if spec.warm_start.teacher_tasks else [])


def build_warm_starts(spec: CoevolveConfig, named: CoevolveConfig, *, rebuild: bool = False,
                      shipped: Path | None = None) -> list[Path]:  # fmt: skip
    """Build the starts `named` (= `with_warm_starts(spec)`) names that the model cache lacks, or all of
    them with `rebuild`: merged from the shipped adapter of that name (`start_adapters.shipped_adapter`,
    looked up in `shipped`) when there is one and not `rebuild`, in seconds; else trained, minutes on
    CPU, once per machine. The checkpoints built (none when all exist)."""
    directory, section, built = cache_dir() / WARM_STARTS, spec.warm_start, []
    policy = cache_dir() / named.model.name if section.policy_tasks else Path(spec.model.name)
    if section.policy_tasks and (rebuild or not (policy / RECORD).is_file()):
        train = lambda: warm_start_checkpoint(spec, policy_start_settings(spec), directory)  # noqa: E731
        built.append(_build(policy, spec.model.name, spec, train, rebuild=rebuild, shipped=shipped))
    teacher = cache_dir() / named.teacher.model if section.teacher_tasks else None
    if teacher and (rebuild or not (teacher / RECORD).is_file()):
        start = policy if section.policy_tasks else spec.model.name
        train = lambda: teacher_checkpoint(spec, start, teacher_start_settings(spec), directory)  # noqa: E731
        built.append(_build(teacher, str(start), spec, train, rebuild=rebuild, shipped=shipped))
    return built


def _build(target: Path, base: str, spec: CoevolveConfig, train: Callable[[], Path], *, rebuild: bool,
           shipped: Path | None) -> Path:  # fmt: skip
    name = f"{WARM_STARTS}/{target.name}"
    adapter = None if rebuild else shipped_adapter(target.name, shipped)
    if adapter is None:
        print(f"warm start: building {name} (once per machine)", file=sys.stderr, flush=True)
        shutil.rmtree(target, ignore_errors=True)
        return train()
    print(f"warm start: merging the shipped adapter of {name}", file=sys.stderr, flush=True)
    try:
        record = {**json.loads((adapter / RECORD).read_text()), "merged_from": f"configs/warm-starts/{target.name}"}
        return merge_adapter(base, adapter, target, record, dtype=spec.model.dtype)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:  # a damaged copy: json, safetensors, peft
        from coevolve.storage.parquet import ArtifactError

        raise ArtifactError(f"the shipped warm start {adapter} does not load ({str(exc).splitlines()[0]}); "
                            f"rebuild it: coevolve models warm-start CONFIG --rebuild --ship") from None  # fmt: skip


def _report(step: int, steps: int, loss: float) -> None:
    print(f"  step {step}/{steps}: loss {loss:.3f}", file=sys.stderr, flush=True)
