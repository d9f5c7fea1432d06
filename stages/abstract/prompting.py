"""The teacher's prompt of the abstract phase (`prompts/abstract.md` beside this module) and the start of
the reply it asks for: a JSON array of tasks, its start written for the teacher (assistant prefill, as the
reflection's is: `stages.explore.prompting`).

    render_prompt("abstract", tools=..., calls=..., max_tasks=...)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coevolve.stages.explore.prompting import prompt_template

ABSTRACT_PREFIX = '[{"solution": ['
"""Solution first: a small teacher picks call indices it can see before it writes a query around them."""
PROMPTS = ("abstract",)


def abstract_prefix(calls: Sequence[dict], *, by_effect: bool = False) -> str:
    """The abstraction reply's start for a group of observed `calls`. One call has one valid solution,
    `[0]`, so it is written for the teacher (a small one may list calls that are not there); more
    calls leave the choice to it. `by_effect`: a one-call reply is started by what the call did
    (its `changed`) too: a read-only call's task asks for what the call read, so its answers are opened
    (`"answers": ["`); a state change's task is an instruction, so it has none and the query comes next."""
    if len(calls) != 1:
        return ABSTRACT_PREFIX
    changed = calls[0].get("changed") if by_effect else None
    if changed is False:
        return ABSTRACT_PREFIX + '0], "answers": ["'
    if changed is True:
        return ABSTRACT_PREFIX + '0], "answers": [], "query": "'
    return ABSTRACT_PREFIX + '0], "answers": ['


def render_prompt(name: str, **values: Any) -> str:
    return prompt_template(name, __package__, PROMPTS).substitute({k: str(v) for k, v in values.items()})
