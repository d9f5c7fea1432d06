"""Build (once) a warm-started copy of a config's policy: `rl.warm_start` on fresh training-family tasks.

    from coevolve.evolution.warm_start import warm_start_checkpoint
    path = warm_start_checkpoint(config, WarmStart(tasks=48), root / "warm-start")
    # then run with model.name=<path>

The reference episodes come from the config's environment drawn with another seed (the environment's
`seed` option + 1,000,003 + settings.seed) from its `train` split; any task whose id is in one of the
run's own splits is skipped, so no evaluation task is ever seen. The checkpoint directory is named by a
hash of (model, environment, settings) and holds the weights, the tokenizer and `warm_start.json` (the
settings, task ids and losses); an existing complete one is reused.

With `settings.teacher` the same tasks also give one abstraction example each (`abstraction_sample`): the
in-process teacher is the policy, and a small model answers the abstraction prompt by copying the
example it is shown, so it is taught the reply on tasks whose answer is known.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from coevolve import envs
from coevolve.agents.reference import reference_sample
from coevolve.config import CoevolveConfig, LocalTeacherConfig
from coevolve.core import ToolCall, content_hash
from coevolve.envs.base import Environment, Task
from coevolve.evolution.abstraction import Group, abstract_messages
from coevolve.evolution.exploration import (
    ContextEnv,
    Target,
    exploration_task,
    explore_instructions,
    reflection_messages,
)
from coevolve.evolution.prompts import ABSTRACT_PREFIX, REFLECT_PREFIX
from coevolve.llm.chat import ChatFormat
from coevolve.llm.models import WARM_STARTS, cache_dir
from coevolve.rl.warm_start import WarmStart, as_batch, warm_start

SEED_OFFSET = 1_000_003
RECORD = "warm_start.json"


def warm_start_key(config: CoevolveConfig, settings: WarmStart) -> str:
    return content_hash({"model": config.model.name, "dtype": config.model.dtype, "env": config.env.name,
                         "options": config.env.options, "settings": asdict(settings),
                         "max_tasks": config.abstract.max_tasks_per_group}, length=12)  # fmt: skip


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


def abstraction_sample(env: Environment, chat: ChatFormat, task: Task, max_tasks: int, *,
                       distractors: int = 0, rng: random.Random | None = None) -> tuple[list[int], list[int]]:  # fmt: skip
    """The teacher's abstraction prompt (`stages.abstract`) for `task`'s reference calls, as an exploration
    would have observed them, answered with the task itself: its calls, answers, user turns and family.
    Ids and loss mask, the reply prefilled with `ABSTRACT_PREFIX` like at inference (`EngineTeacher`).

    `distractors`: that many calls of offered tools that take no argument (reads such as `list_accounts`)
    observed at random places among the reference calls, and left out of the reply's solution: an
    exploration observes more than one task's calls, and the teacher must pick the ones its query asks for.
    """
    tools = env.reset(task).tools
    reference = [call for turn in task.solution or [] for call in turn]
    free = [t["function"]["name"] for t in tools if not t["function"]["parameters"].get("required")]
    plan: list[tuple[ToolCall, bool]] = [(call, True) for call in reference]
    rng = rng or random.Random(0)
    for _ in range(distractors if free else 0):
        plan.insert(rng.randrange(len(plan) + 1), (ToolCall(name=rng.choice(free), arguments={}), False))
    observed = _observe(env, [call for call, _ in plan])
    calls = [{"tool": call.name, "arguments": call.arguments, "observation": text}
             for (call, _), (_, text) in zip(plan, observed, strict=True)]  # fmt: skip
    solution = [i for i, (_, wanted) in enumerate(plan) if wanted]
    group = Group(group_id="warm-start", exploration_id="warm-start", task=task, calls=calls)
    answers = [str(value) for turn in task.checker.get("answers") or [] for value in turn]
    reply = json.dumps([{"solution": solution, "answers": answers, "query": " ".join(task.turns),
                         "intent": task.family.replace("_", " ")}])  # fmt: skip
    if not reply.startswith(ABSTRACT_PREFIX):
        raise AssertionError(f"the abstraction reply must start with {ABSTRACT_PREFIX!r}")
    prompt = chat.prompt_ids(abstract_messages(group, tools, max_tasks), tools=[]) + chat.encode(ABSTRACT_PREFIX)
    target = chat.encode(reply[len(ABSTRACT_PREFIX):]) + [chat.end_of_turn_id]
    return prompt + target, [0] * len(prompt) + [1] * len(target)


def reflection_sample(env: Environment, chat: ChatFormat, task: Task, *,
                      rng: random.Random | None = None) -> tuple[list[int], list[int]]:  # fmt: skip
    """The teacher's reflection prompt (`stages.explore`) on a failed attempt at `task`, answered with a
    context the task's reference solution supports. Ids and loss mask, the reply prefilled with
    `REFLECT_PREFIX` like at inference.

    The attempt is the reference calls without the last one (nothing, for a one-call solution), marked by
    a boundary signal; the reply names the reference's tools, diagnoses the missing call and plans the
    calls in order. Trained on abstraction examples alone, a teacher can lose this reply's format: its
    reflections stop parsing, and it explores nothing."""
    rng = rng or random.Random(0)
    tools = env.reset(task).tools
    reference = [call for turn in task.solution or [] for call in turn]
    *done, missing = reference
    steps = []
    for i, (call, (ok, text)) in enumerate(zip(done, _observe(env, done), strict=True)):
        steps.append({"step": i, "call_index": 0, "kind": "call", "tool": call.name, "ok": ok,
                      "arguments": json.dumps(call.arguments), "observation": text})  # fmt: skip
    steps.append({"step": len(done), "call_index": 0, "kind": "answer", "reply": "Done."})
    successes = rng.randint(1, 7)
    evidence = json.dumps({"successes": successes, "failures": 8 - successes, "samples": 8}, separators=(",", ":"))
    reward = env.evaluate().reward
    target = Target("warm-start", task, "boundary", steps=steps, outcome=f"reward {reward:.2f}, failure",
                    evidence=evidence)  # fmt: skip
    reply = json.dumps(reference_context(task))
    if not reply.startswith(REFLECT_PREFIX):
        raise AssertionError(f"the reflection reply must start with {REFLECT_PREFIX!r}")
    prompt = chat.prompt_ids(reflection_messages(target, tools), tools=[]) + chat.encode(REFLECT_PREFIX)
    answer = chat.encode(reply[len(REFLECT_PREFIX):]) + [chat.end_of_turn_id]
    return prompt + answer, [0] * len(prompt) + [1] * len(answer)


def reference_context(task: Task) -> dict:
    """The exploration context a reflection on a failed attempt at `task` should reply with: the reference's
    tools, a diagnosis of the attempt that stopped before its last call, and a plan that calls them in
    order (`reflection_sample`'s reply, `exploration_sample`'s instructions)."""
    reference = [call for turn in task.solution or [] for call in turn]
    *done, missing = reference
    names = list(dict.fromkeys(call.name for call in reference))
    arguments = ", ".join(f"{k}={v}" for k, v in missing.arguments.items())
    diagnosis = (f"The agent stopped before calling {missing.name}({arguments}), so the task was left unfinished."
                 if done else f"The agent answered without calling {missing.name}, so nothing was done.")  # fmt: skip
    plan = (f"Call {', then '.join(names)} in this order with the values a user names, and vary the arguments "
            f"to see what each call returns and changes.")  # fmt: skip
    return {"tools": names, "apps": [], "diagnosis": diagnosis, "plan": plan}


def other_values(listing: Any, value: str) -> list[str]:
    """The values a JSON result shows where it shows `value`: the other strings of a list that holds it, and
    the same key's values in the other objects of a list where an object holds it under that key."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for item in node.values():
                walk(item)
        elif isinstance(node, list):
            if value in node:
                found.extend(x for x in node if isinstance(x, str) and x != value)
            objects = [item for item in node if isinstance(item, dict)]
            keys = {k for item in objects for k, v in item.items() if v == value}
            found.extend(item[k] for item in objects for k in sorted(keys)
                         if isinstance(item.get(k), str) and item[k] != value)  # fmt: skip
            for item in node:
                walk(item)

    walk(listing)
    return list(dict.fromkeys(found))


def explored_variant(env: Environment, task: Task, rng: random.Random) -> tuple[ToolCall, ToolCall] | None:
    """What an exploration beyond `task`'s request can do: a call of an offered tool that takes no argument
    (a listing such as `list_accounts`) and a reference call of `task` with one string argument replaced by
    another value that listing shows in the task's initial state (`other_values`); None when no listing
    shows another value for any reference argument."""
    tools = env.reset(task).tools
    free = [t["function"]["name"] for t in tools if not t["function"]["parameters"].get("required")]
    listings = []
    for name, (ok, text) in zip(free, _observe(env, [ToolCall(name=name) for name in free]), strict=True):
        try:
            listings.append((name, json.loads(text) if ok else None))
        except ValueError:
            continue
    reference = [call for turn in task.solution or [] for call in turn]
    strings = [(call, key, value) for call in reference for key, value in call.arguments.items()
               if isinstance(value, str)]  # fmt: skip
    for call, key, value in strings:
        for name, listing in listings:
            others = [v for v in other_values(listing, value) if v not in call.arguments.values()]
            if others:
                variant = ToolCall(name=call.name, arguments={**call.arguments, key: rng.choice(others)})
                return ToolCall(name=name), variant
    return None


def exploration_sample(env: Environment, chat: ChatFormat, task: Task, *,
                       rng: random.Random | None = None) -> tuple[list[int], list[int]] | None:  # fmt: skip
    """The teacher's exploration episode (`stages.explore`) on `task`, under the context its reflection
    example plans (`reference_context`), acted out: the reference solution for the task's own turns, then
    in the follow-up turn a listing and a reference call with another value it shows (`explored_variant`).
    Ids and loss mask like `agents.reference.reference_sample`. A teacher that only learned to solve tasks
    tends to repeat the task's own calls in the follow-up, or to name values nothing showed.
    None when the task has no such variant."""
    variant = explored_variant(env, task, rng or random.Random(0))
    if variant is None:
        return None
    solution = list(task.solution or [])
    solution += [[] for _ in range(len(task.turns) - len(solution))]
    episode = exploration_task(task, 1).model_copy(update={"solution": [*solution, list(variant)]})
    instructions = {task.id: explore_instructions({**reference_context(task), "unknown_tools": []})}
    return reference_sample(ContextEnv(env, instructions), chat, episode)


def _observe(env: Environment, calls: list[ToolCall]) -> list[tuple[bool, str]]:
    """Run `calls` in order in one step (a turn's step limit would cut a long list of one-call steps);
    per call, whether it ran and its result or error as text."""
    if not calls:
        return []
    ran = env.step(list(calls)).info.get("calls", [])
    if len(ran) != len(calls):
        raise RuntimeError(f"the environment ran {len(ran)} of {len(calls)} calls in one step")

    def text(record: dict) -> str:
        observation = record.get("result") if record.get("ok") else record.get("error")
        return observation if isinstance(observation, str) else json.dumps(observation, default=str)

    return [(bool(record.get("ok")), text(record)) for record in ran]


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
    losses = warm_start(model, samples, settings, progress=_report)
    record = {"base_model": config.model.name, "settings": asdict(settings), "examples": len(rows),
              "task_ids": [t.id for t in tasks],
              "families": sorted({t.family for t in tasks}), "losses": losses,
              "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    return _save(model, tokenizer, record, target)


MAX_DISTRACTORS = 3
"""Most distractor calls in a teacher abstraction example (`teacher_checkpoint` draws 0 to this many)."""


def teacher_key(config: CoevolveConfig, start: Path | str, settings: WarmStart, *,
                max_distractors: int = MAX_DISTRACTORS) -> str:  # fmt: skip
    """The directory name of `teacher_checkpoint`'s checkpoint: what it is trained from and on. A `start`
    built by this module is named by its own content key, which stands for it: the teacher built on a
    storage root's warm start keeps its key when the root moves or is copied."""
    built = (Path(start) / RECORD).is_file()
    return _teacher_key(config, Path(start).name if built else str(start), settings, max_distractors)


def _teacher_key(config: CoevolveConfig, start: str, settings: WarmStart, max_distractors: int) -> str:
    key = content_hash({"start": start, "settings": asdict(settings),
                        "max_distractors": max_distractors,
                        "replies": ["abstract", "reflect", "explore"],
                        "env": config.env.name, "options": config.env.options,
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
    (`reflection_sample`), and an exploration episode each that has a variant to explore
    (`exploration_sample`)."""
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
    print(f"teacher warm start: {len(tasks)} abstraction examples (0-{max_distractors} distractor calls), "
          f"{len(tasks)} reflection examples and {len(explored)} exploration examples, {settings.epochs} epochs",
          file=sys.stderr, flush=True)  # fmt: skip
    losses = warm_start(model, as_batch(rows, groups), settings, progress=_report)
    record = {"start": str(start), "settings": asdict(settings), "distractors": distractors,
              "examples": len(rows), "explorations": len(explored), "task_ids": [t.id for t in tasks],
              "losses": losses, "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    return _save(model, tokenizer, record, target)


def policy_start_settings(config: CoevolveConfig) -> WarmStart:
    section = config.warm_start
    return WarmStart(tasks=section.policy_tasks, epochs=section.epochs, lr=section.lr)


def teacher_start_settings(config: CoevolveConfig) -> WarmStart:
    """Other fresh tasks than the policy's (seed 1); the abstraction reply is part of the teacher's own
    examples, not added again."""
    section = config.warm_start
    return WarmStart(tasks=section.teacher_tasks, epochs=section.epochs, lr=section.lr, seed=1, teacher=False)


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


def build_warm_starts(spec: CoevolveConfig, named: CoevolveConfig) -> list[Path]:
    """Build the starts `named` (= `with_warm_starts(spec)`) names that the model cache lacks; the
    checkpoints built (none when all exist). Each is minutes of training on CPU, once per machine."""
    directory, built = cache_dir() / WARM_STARTS, []
    policy = cache_dir() / named.model.name if spec.warm_start.policy_tasks else Path(spec.model.name)
    if spec.warm_start.policy_tasks and not (policy / RECORD).is_file():
        print(f"warm start: building the policy's start {named.model.name} (once per machine)",
              file=sys.stderr, flush=True)  # fmt: skip
        built.append(warm_start_checkpoint(spec, policy_start_settings(spec), directory))
    if spec.warm_start.teacher_tasks and not (cache_dir() / named.teacher.model / RECORD).is_file():
        print(f"warm start: building the teacher {named.teacher.model} (once per machine)", file=sys.stderr,
              flush=True)  # fmt: skip
        built.append(teacher_checkpoint(spec, policy if spec.warm_start.policy_tasks else spec.model.name,
                                        teacher_start_settings(spec), directory))  # fmt: skip
    return built


def _report(step: int, steps: int, loss: float) -> None:
    print(f"  step {step}/{steps}: loss {loss:.3f}", file=sys.stderr, flush=True)


def _save(model: Any, tokenizer: Any, record: dict, target: Path) -> Path:
    """Write weights, tokenizer and `RECORD` next to `target`, then move them into place."""
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target
