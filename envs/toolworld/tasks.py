"""Seeded task generation for the tool world's splits.

    train / test        : the training families; test uses its own seed stream and never repeats a
                          train task id
    validation          : the training families, its own seed stream, no id of train or test: the split
                          that development decisions are made on, so test is only ever reported
    heldout-templates   : families never used in train or test (generalisation to new task shapes)

`generate_family_tasks` draws fresh tasks of some families from a named stream, none of any split: what
an oracle curriculum would add to the training data.

Task `i` of a split is drawn from family `i mod F` (so families are balanced) with
`random.Random(f"toolworld:{seed}:{split}:{attempt}")`; string seeds are hashed with SHA-512 by
`random`, so generation is identical across processes. Duplicate ids are skipped.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from coevolve.envs.base import Task, family_tools
from coevolve.envs.toolworld import families_cross_app, families_one_app
from coevolve.envs.toolworld.checker import build_checker
from coevolve.envs.toolworld.templates import Template
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.envs.toolworld.world import World

ENV_NAME = "toolworld"
SPLITS = ("train", "test", "validation", "heldout-templates")
TRAIN_TEMPLATES: tuple[Template, ...] = families_one_app.TRAIN + families_cross_app.TRAIN
HELDOUT_TEMPLATES: tuple[Template, ...] = families_one_app.HELDOUT + families_cross_app.HELDOUT
MAX_ATTEMPTS_PER_TASK = 20


def templates_of(split: str) -> tuple[Template, ...]:
    if split not in SPLITS:
        raise ValueError(f"unknown toolworld split {split!r}; splits: {', '.join(SPLITS)}")
    return HELDOUT_TEMPLATES if split == "heldout-templates" else TRAIN_TEMPLATES


def make_task(catalog: ToolCatalog, template: Template, rng: random.Random, split: str) -> Task:
    """Draw one task of `template`; its checker comes from replaying the reference solution."""
    draft = template.build(rng)
    checker = build_checker(catalog, draft.initial_state, draft.turns, draft.solution, draft.answers)
    if checker["final_state"] == World(draft.initial_state).state() and not any(draft.answers):
        raise ValueError(f"template {template.name} drew a task that doing nothing would solve")
    return Task(
        id=Task.make_id(ENV_NAME, draft.initial_state, draft.turns, checker),
        env=ENV_NAME,
        split=split,
        family=template.name,
        initial_state=draft.initial_state,
        turns=draft.turns,
        solution=draft.solution,
        checker=checker,
        source="benchmark",
    )


def generate_split(
    catalog: ToolCatalog, seed: int, split: str, n: int, exclude_ids: Collection[str] = ()
) -> list[Task]:
    """`n` distinct tasks of `split` (fewer only if the families cannot yield that many new ids)."""
    families: Sequence[Template] = templates_of(split)
    seen, tasks = set(exclude_ids), []
    for attempt in range(n * MAX_ATTEMPTS_PER_TASK):
        if len(tasks) >= n:
            break
        rng = random.Random(f"{ENV_NAME}:{seed}:{split}:{attempt}")
        task = make_task(catalog, families[len(tasks) % len(families)], rng, split)
        if task.id not in seen:
            seen.add(task.id)
            tasks.append(task)
    return tasks


def families_calling(tools: Sequence[str], samples: int = 4) -> list[str]:
    """The training families one of whose drafts (`samples` drawn from a fixed stream) calls exactly `tools`,
    in any order: what a synthesized task of those tools is an instance of."""
    wanted = set(tools)

    def calls(template: Template, i: int) -> set[str]:
        draft = template.build(random.Random(f"{ENV_NAME}:tools:{template.name}:{i}"))
        return {call.name for turn in draft.solution for call in turn}

    return [t.name for t in TRAIN_TEMPLATES if any(calls(t, i) == wanted for i in range(samples))]


def generate_family_tasks(
    catalog: ToolCatalog, seed: int, families: Sequence[str], n: int, stream: str, exclude_ids: Collection[str]
) -> list[Task]:
    """`n` distinct tasks of the training `families` (in turn) from the seed stream `stream`, none of whose
    ids is in `exclude_ids` (the splits'); split `fresh`. A synthesized task's family (`synth:<tools>`)
    stands for the families calling those tools (`families_calling`; none: it adds no family)."""
    families = list(dict.fromkeys(
        name for family in families
        for name in ([family] if family_tools(family) is None else families_calling(family_tools(family)))
    ))  # fmt: skip
    by_name = {template.name: template for template in TRAIN_TEMPLATES}
    unknown = sorted(set(families) - set(by_name))
    if unknown:
        raise ValueError(f"no training family {unknown[0]!r}; families: {', '.join(sorted(by_name))}")
    seen, tasks = set(exclude_ids), []
    for attempt in range(n * MAX_ATTEMPTS_PER_TASK):
        if len(tasks) >= n or not families:
            break
        rng = random.Random(f"{ENV_NAME}:{seed}:fresh:{stream}:{attempt}")
        task = make_task(catalog, by_name[families[len(tasks) % len(families)]], rng, "fresh")
        if task.id not in seen:
            seen.add(task.id)
            tasks.append(task)
    return tasks
