"""Seeded task generation for the tool world's splits.

    train / test        : the training families; test uses its own seed stream and never repeats a
                          train task id
    validation          : the training families, its own seed stream, no id of train or test: the split
                          that development decisions are made on, so test is only ever reported
    heldout-templates   : families never used in train or test (generalisation to new task shapes)
    gap-validation /    : the gap families an experiment names (`families_gap`, env option `gap_families`):
    gap-test              one-call tasks of tools no training family calls, their own seed streams

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
from coevolve.envs.toolworld import families_cross_app, families_gap, families_one_app
from coevolve.envs.toolworld.checker import build_checker
from coevolve.envs.toolworld.templates import Template
from coevolve.envs.toolworld.tools import ToolCatalog
from coevolve.envs.toolworld.world import World

ENV_NAME = "toolworld"
SPLITS = ("train", "test", "validation", "heldout-templates")
GAP_SPLITS = ("gap-validation", "gap-test")
"""Splits of the gap families; an environment has them only when its `gap_families` option names some."""
TRAIN_TEMPLATES: tuple[Template, ...] = families_one_app.TRAIN + families_cross_app.TRAIN
HELDOUT_TEMPLATES: tuple[Template, ...] = families_one_app.HELDOUT + families_cross_app.HELDOUT
GAP_TEMPLATES: tuple[Template, ...] = families_gap.CANDIDATES + families_gap.RETIRED
"""Every drawable gap family: the candidates and the first coverage plan's retired ones (`families_gap`)."""
MAX_ATTEMPTS_PER_TASK = 20


def templates_of(split: str, gap_families: Sequence[str] = ()) -> tuple[Template, ...]:
    """The families `split` draws from (the gap splits: the named `gap_families`, in the given order)."""
    if split in GAP_SPLITS and gap_families:
        by_name = {t.name: t for t in GAP_TEMPLATES}
        return tuple(by_name[name] for name in gap_families)
    if split not in SPLITS:
        known = (*SPLITS, *GAP_SPLITS) if gap_families else SPLITS
        raise ValueError(f"unknown toolworld split {split!r}; splits: {', '.join(known)}")
    return HELDOUT_TEMPLATES if split == "heldout-templates" else TRAIN_TEMPLATES


def gap_family_errors(gap_families: Sequence[str]) -> list[str]:
    """Why `gap_families` cannot be a coverage gap, one line each (empty: it can): each must be a gap family
    (`families_gap`), never a training or `heldout-templates` family, and call no tool a training family
    calls (D_0, the warm starts and the teacher's examples all draw from the training families)."""
    gap = {t.name: t for t in GAP_TEMPLATES}
    trained = {t.name for t in TRAIN_TEMPLATES} | {t.name for t in HELDOUT_TEMPLATES}
    errors = []
    for name in gap_families:
        if name in trained:
            errors.append(f"env.options.gap_families: {name!r} is a training or heldout-templates family, no gap")
        elif name not in gap:
            errors.append(f"env.options.gap_families: no gap family {name!r}; gap families: {', '.join(gap)}")
        elif family_calls(gap[name]) & training_tools():
            shared = ", ".join(sorted(family_calls(gap[name]) & training_tools()))
            errors.append(f"env.options.gap_families: {name!r} calls {shared}, which a training family calls")
    if len(set(gap_families)) != len(gap_families):
        errors.append("env.options.gap_families: a family is named twice")
    return errors


def family_calls(template: Template, samples: int = 8) -> set[str]:
    """The tools `samples` drafts of `template` (from a fixed stream) call."""
    return {call.name for i in range(samples)
            for turn in template.build(random.Random(f"{ENV_NAME}:calls:{template.name}:{i}")).solution
            for call in turn}  # fmt: skip


def training_tools() -> set[str]:
    """Every tool some training family calls."""
    return set().union(*(family_calls(t) for t in TRAIN_TEMPLATES))


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
    catalog: ToolCatalog, seed: int, split: str, n: int, exclude_ids: Collection[str] = (),
    gap_families: Sequence[str] = (),
) -> list[Task]:
    """`n` distinct tasks of `split` (fewer only if the families cannot yield that many new ids)."""
    families: Sequence[Template] = templates_of(split, gap_families)
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
    """`n` distinct tasks of the training or gap `families` (in turn) from the seed stream `stream`, none of
    whose ids is in `exclude_ids` (the splits'); split `fresh`. A synthesized task's family (`synth:<tools>`)
    stands for the families calling those tools (`families_calling`; none: it adds no family)."""
    families = list(dict.fromkeys(
        name for family in families
        for name in ([family] if family_tools(family) is None else families_calling(family_tools(family)))
    ))  # fmt: skip
    by_name = {template.name: template for template in (*TRAIN_TEMPLATES, *GAP_TEMPLATES)}
    unknown = sorted(set(families) - set(by_name))
    if unknown:
        raise ValueError(f"no training or gap family {unknown[0]!r}; families: {', '.join(sorted(by_name))}")
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
