"""The teacher's prompts of the explore phase and the start of the reflection reply. Each prompt is a Markdown
template in `prompts/` beside this module: reflect, explore, explore_follow_up, explore_named_tool.

Reflection asks for JSON. An in-process teacher starts its reply with the first characters of that JSON
(assistant prefill, `EngineTeacher.complete(reply_prefix=...)`), which turns a small model's prose into JSON
far more often; a served teacher ignores the prefix.

    render_prompt("reflect", signal=..., task=..., tools=..., trajectory=..., outcome=...)
"""

from __future__ import annotations

from importlib import resources
from string import Template
from typing import Any

REFLECT_PREFIX = '{"tools": ["'
PROMPTS = ("reflect", "explore", "explore_follow_up", "explore_named_tool")


def prompt_template(name: str, package: str = __package__, names: tuple[str, ...] = PROMPTS) -> Template:
    """`prompts/<name>.md` of the phase `package` as a `string.Template` ($name placeholders; JSON braces stay
    literal)."""
    if name not in names:
        raise ValueError(f"unknown prompt {name!r}; prompts: {', '.join(names)}")
    return Template(resources.files(package).joinpath("prompts", f"{name}.md").read_text(encoding="utf-8"))


def render_prompt(name: str, **values: Any) -> str:
    return prompt_template(name).substitute({k: str(v) for k, v in values.items()})
