"""The teacher LLM of data evolution: it reflects on weak trajectories, explores, and abstracts tasks.

`make_teacher(ctx, round_)` resolves the `teacher` config section:

- `type: policy` (CPU default): the policy of round r-1 itself; text replies are generated through its
  chat template (`ChatFormat.prompt_ids` + `HfEngine.generate`).
- `type: local`: another model loaded in this process with fixed weights (a separately trained teacher
  checkpoint, or a bigger model on a GPU), through its own chat template and `HfEngine`; loaded once
  per process.
- `type: openai`: a model behind an OpenAI-compatible server (`llm.openai_engine.OpenAIEngine`); text
  replies through chat completions, exploration episodes through the completions endpoint.

Every teacher has an `engine` and a `chat` format so that exploration episodes run in the ordinary
agent loop, and `complete(conversations, sampling, reply_prefix=...)` for text replies. The reflection and
abstraction callers pass the first characters of the JSON they expect (`REFLECT_PREFIX`,
`ABSTRACT_PREFIX`): the in-process teacher starts its reply with them (assistant prefill), which turns a
small model's prose into JSON far more often (SmolLM2-135M reflections: 1 of 16 parsed without, 12 of
16 with, `benchmarks/teacher_prefill_probe.py`); the returned text includes the prefix. A served teacher (chat
completions) answers from scratch and ignores the prefix. Teacher output is data: it is
only ever parsed with `json.loads` (`extract_json` finds the first JSON value in a reply, within size
and depth caps) and stored raw next to its parse result. Prompts are files in `llm/prompts/`.

Tests replace `make_teacher` (module attribute) with a scripted fake.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any, Protocol

from coevolve.llm.engine import Engine, SamplingParams
from coevolve.pipeline.context import RunContext

MAX_REPLY_CHARS = 50_000
MAX_JSON_DEPTH = 20
MAX_JSON_STARTS = 200
"""Most `{`/`[` positions tried per reply, so a hostile reply cannot make parsing quadratic."""
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


REFLECT_PREFIX = '{"tools": ["'
ABSTRACT_PREFIX = '[{"solution": ['
"""Solution first: a small teacher picks call indices it can see before it writes a query around them."""


def abstract_prefix(calls: Sequence[dict], *, by_effect: bool = False) -> str:
    """The abstraction reply's start for a group of observed `calls`. One call has one valid solution,
    `[0]`, so it is written for the teacher (a small one wrote `[0, 1, 2]` for most one-call groups);
    more calls leave the choice to it. `by_effect`: a one-call reply is started by what the call did
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


class JsonReplyError(ValueError):
    """A teacher reply without a usable JSON value; the message is the row's `reason`."""


@dataclass(frozen=True)
class TeacherSettings:
    temperature: float
    max_new_tokens: int
    step_max_new_tokens: int
    max_context_tokens: int

    def text_sampling(self, seed: int) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens, seed=seed)

    def step_sampling(self, seed: int) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature, max_new_tokens=self.step_max_new_tokens, seed=seed
        )


class Teacher(Protocol):
    """What the evolution stages need from a teacher LLM."""

    version: str
    engine: Engine
    chat: Any  # llm.chat.ChatFormat: renders exploration episodes for `engine`
    settings: TeacherSettings

    def complete(
        self, conversations: list[list[dict]], sampling: SamplingParams, *, reply_prefix: str = ""
    ) -> list[str]:
        """One text reply per conversation (lists of {role, content}; a leading system message allowed).

        `reply_prefix`: the start of the expected reply; a teacher that can continue a partial reply
        starts with it (and returns it as part of the text), others ignore it.
        """
        ...


@dataclass
class EngineTeacher:
    """A teacher served by a token-level engine: text replies go through the chat template."""

    version: str
    engine: Engine
    chat: Any
    settings: TeacherSettings

    def complete(
        self, conversations: list[list[dict]], sampling: SamplingParams, *, reply_prefix: str = ""
    ) -> list[str]:
        primed = self.chat.tokenizer.encode(reply_prefix, add_special_tokens=False) if reply_prefix else []
        prompts = [self.chat.prompt_ids(messages, tools=[]) + primed for messages in conversations]
        return [reply_prefix + c.text for c in self.engine.generate(prompts, sampling)] if prompts else []


@dataclass
class OpenAITeacher:
    """A teacher behind an OpenAI-compatible server: chat completions for text."""

    version: str
    engine: Any  # llm.openai_engine.OpenAIEngine
    chat: Any
    settings: TeacherSettings

    def complete(
        self, conversations: list[list[dict]], sampling: SamplingParams, *, reply_prefix: str = ""
    ) -> list[str]:
        return self.engine.chat(conversations, sampling)


def teacher_version(ctx: RunContext, round_: int) -> str:
    """Names the teacher's weights for cache keys: the policy version, or the served model."""
    cfg = ctx.config.teacher
    if cfg.type == "policy":
        return ctx.policy_after(ctx.evolution_policy_round(round_))[0]
    if cfg.type == "local":
        return f"local:{cfg.model}:{cfg.dtype}"
    return f"openai:{cfg.model}@{cfg.base_url}"


def _policy_round(ctx: RunContext, round_: int, policy_round: int | None) -> int:
    return ctx.evolution_policy_round(round_) if policy_round is None else policy_round


def make_teacher(ctx: RunContext, round_: int, *, policy_round: int | None = None) -> Teacher:
    """The teacher of round `round_`'s evolution. A policy teacher is the policy the round's evolution
    uses (`RunContext.evolution_policy_round`) unless `policy_round` names another (-1: the base model,
    for the bootstrap of D_0)."""
    cfg = ctx.config.teacher
    settings = TeacherSettings(
        cfg.temperature, cfg.max_new_tokens, cfg.step_max_new_tokens, cfg.max_context_tokens
    )
    if cfg.type == "policy":
        policy = ctx.use_policy(_policy_round(ctx, round_, policy_round))
        return EngineTeacher(policy.version, policy.engine, policy.chat, settings)
    if cfg.type == "local":
        engine, chat = _local_model(cfg.model, cfg.dtype, cfg.device)
        return EngineTeacher(teacher_version(ctx, round_), engine, chat, settings)
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.openai_engine import OpenAIEngine

    if cfg.tokenizer is None:
        tokenizer = ctx.use_policy(_policy_round(ctx, round_, policy_round)).tokenizer
    else:
        from coevolve.llm.models import resolve_model
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.tokenizer))
    engine = OpenAIEngine(
        cfg.base_url,
        cfg.model,
        api_key_env=cfg.api_key_env,
        tokenizer=tokenizer,
        token_ids=cfg.token_ids,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
    )
    return OpenAITeacher(teacher_version(ctx, round_), engine, ChatFormat(tokenizer), settings)


@functools.cache
def _local_model(name: str, dtype: str, device: str) -> tuple[Engine, Any]:
    """(engine, chat format) of a local teacher model, loaded once per process."""
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.hf_engine import HfEngine
    from coevolve.llm.models import load_model

    model, tokenizer = load_model(name, dtype=dtype, device=device)
    return HfEngine(model, tokenizer, version=f"local:{name}"), ChatFormat(tokenizer)


# --- prompts ------------------------------------------------------------------------------------


def prompt_template(name: str) -> Template:
    """`llm/prompts/<name>.md` as a `string.Template` ($name placeholders; JSON braces stay literal)."""
    return Template(resources.files("coevolve.evolution").joinpath("prompts", f"{name}.md").read_text(encoding="utf-8"))


def render_prompt(name: str, **values: Any) -> str:
    return prompt_template(name).substitute({k: str(v) for k, v in values.items()})


# --- parsing teacher replies --------------------------------------------------------------------


def extract_json(reply: str, expect: type | None = None) -> Any:
    """The first JSON value of type `expect` (dict or list) in `reply`, tolerating prose and code fences.

    Raises `JsonReplyError` with a short reason when there is none. Nothing is evaluated: candidates
    are decoded with `json.JSONDecoder.raw_decode` from each `{` / `[` in turn.
    """
    if not isinstance(reply, str) or not reply.strip():
        raise JsonReplyError("empty reply")
    if len(reply) > MAX_REPLY_CHARS:
        raise JsonReplyError(f"reply too long ({len(reply)} > {MAX_REPLY_CHARS} characters)")
    opener = {dict: "{", list: "["}.get(expect, "{[")  # type: ignore[call-overload]
    decoder = json.JSONDecoder()
    for text in [*_FENCE.findall(reply), reply]:
        starts = [i for i, char in enumerate(text) if char in opener][:MAX_JSON_STARTS]
        for start in starts:
            try:
                value, _ = decoder.raw_decode(text, start)
            except (ValueError, RecursionError):
                continue
            if (expect is None or isinstance(value, expect)) and _depth(value) <= MAX_JSON_DEPTH:
                return value
    wanted = {dict: "JSON object", list: "JSON array"}.get(expect, "JSON value")  # type: ignore[call-overload]
    raise JsonReplyError(f"no {wanted} in the reply")


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def short_text(value: Any, limit: int) -> str:
    """`value` as one string of at most `limit` characters (for prompts and reasons)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
