"""The teacher's prompts and the starts of the replies they ask for. Each prompt is a Markdown template beside
the stage that sends it: `stages/explore/prompts/` (reflect, explore, explore_follow_up) and
`stages/abstract/prompts/` (abstract).

Reflection and abstraction ask for JSON. An in-process teacher starts its reply with the first characters
of that JSON (assistant prefill, `EngineTeacher.complete(reply_prefix=...)`), which turns a small model's
prose into JSON far more often; a served teacher ignores the prefix.

    render_prompt("reflect", signal=..., task=..., tools=..., trajectory=..., outcome=...)
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from string import Template
from typing import Any

REFLECT_PREFIX = '{"tools": ["'
ABSTRACT_PREFIX = '[{"solution": ['
"""Solution first: a small teacher picks call indices it can see before it writes a query around them."""


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


SENT_BY = {"reflect": "explore", "explore": "explore", "explore_follow_up": "explore", "explore_named_tool": "explore",
           "abstract": "abstract"}
"""Each prompt's stage: its template is `stages/<stage>/prompts/<name>.md`."""


def prompt_template(name: str) -> Template:
    """`stages/<stage>/prompts/<name>.md` as a `string.Template` ($name placeholders; JSON braces stay literal)."""
    if name not in SENT_BY:
        raise ValueError(f"unknown prompt {name!r}; prompts: {', '.join(SENT_BY)}")
    package = resources.files(f"coevolve.stages.{SENT_BY[name]}")
    text = package.joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")
    return Template(text)


def render_prompt(name: str, **values: Any) -> str:
    return prompt_template(name).substitute({k: str(v) for k, v in values.items()})
