"""The teacher start's named-tool examples (an extension): behind their own option, which leaves the shipped
starts' keys alone; they name and call training tools the task does not call, never a coverage-gap tool."""

from __future__ import annotations

from coevolve import envs
from coevolve.benchmarks.learning.coverage import gap_tools
from coevolve.config import load_config
from coevolve.llm.chat import ChatFormat
from coevolve.stages.warm_start.build import (
    named_tool_rows,
    teacher_start_settings,
    warm_start_tasks,
    with_warm_starts,
)
from tests.conftest import CONFIGS

DEMO_TEACHER = "teacher-32b66f135667"
"""The demo's teacher start, as built and shipped before the option existed (configs/warm-starts/)."""


def test_the_demo_teacher_start_keeps_its_key_and_the_option_gives_another():
    demo = load_config(CONFIGS / "demo.yaml")
    assert with_warm_starts(demo).teacher.model == f"warm-start/{DEMO_TEACHER}"
    assert (CONFIGS / "warm-starts" / DEMO_TEACHER).is_dir()
    named = load_config(CONFIGS / "demo.yaml", ["warm_start.teacher_named_tool_examples=true"])
    assert with_warm_starts(named).teacher.model not in (f"warm-start/{DEMO_TEACHER}", None)
    assert with_warm_starts(named).model.name == with_warm_starts(demo).model.name  # the policy's start too


def test_named_tool_examples_name_and_call_training_tools_never_a_gap_tool(tokenizer):
    config = load_config(CONFIGS / "coverage-smollm2.yaml",
                         ["warm_start.teacher_tasks=24", "warm_start.teacher_named_tool_examples=true"])
    tasks = warm_start_tasks(config, teacher_start_settings(config))
    env, chat = envs.make(config.env.name, **config.env.options), ChatFormat(tokenizer)
    rows = named_tool_rows(config, env, chat, tasks, seed=1)
    assert len(rows) >= 12 and {group for (group, _), _ in rows} == {"reflect-named", "explore-named"}
    gap = gap_tools(config.gap_families)
    trained = {c.name for t in tasks for turn in t.solution for c in turn}
    named = set()
    for (group, family), (ids, mask) in rows:
        taught = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
        assert not [tool for tool in gap if tool in taught]
        if group == "explore-named":
            task = next(t for t in tasks if t.family == family)
            own = {c.name for turn in task.solution for c in turn}
            named |= {tool for tool in trained - own if f'"name": "{tool}"' in taught}
    assert named  # the explorations call training tools their task's reference never calls
    off = load_config(CONFIGS / "coverage-smollm2.yaml", ["warm_start.teacher_tasks=24"])
    assert named_tool_rows(off, env, chat, tasks, seed=1) == []
