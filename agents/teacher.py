"""The teacher LLM of data evolution: it reflects on weak trajectories, explores, and abstracts tasks.

`make_teacher(config, policy, version)` resolves the `teacher` config section:

- `type: policy` (CPU default): the policy itself (the one the round's evolution uses); text replies are
  generated through its chat template (`ChatFormat.prompt_ids` + its engine).
- `type: local`: another model loaded in this process with fixed weights (a separately trained teacher
  checkpoint, or a bigger model on a GPU), through its own chat template and `HfEngine`; loaded once
  per process.
- `type: openai`: a model behind an OpenAI-compatible server (`llm.openai_engine.OpenAIEngine`); text
  replies through chat completions, exploration episodes through the completions endpoint.

Every teacher has an `engine` and a `chat` format so that exploration episodes run in the ordinary
agent loop, and `complete(conversations, sampling, reply_prefix=...)` for text replies: an in-process
teacher starts its reply with `reply_prefix` (assistant prefill; the returned text includes it), a served
one (chat completions) answers from scratch. Teacher output is data: it is only ever parsed with
`json.loads` (`llm.replies.extract_json`) and stored raw next to its parse result.

Tests hand a scripted teacher to the run through `open_run(..., teacher_factory=...)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from coevolve.config import TeacherConfig
from coevolve.llm.engine import Engine, SamplingParams


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


def teacher_version(config: TeacherConfig, policy_version: str) -> str:
    """Names the teacher's weights for cache keys: the policy's version, or the configured model."""
    if config.type == "policy":
        return policy_version
    if config.type == "local":
        return f"local:{config.model}:{config.dtype}"
    return f"openai:{config.model}@{config.base_url}"


def make_teacher(config: TeacherConfig, policy: Callable[[], Any], version: str) -> Teacher:
    """The configured teacher; `policy()` gives the policy a policy teacher is (and whose tokenizer a served
    teacher renders episodes with, unless `teacher.tokenizer` names another), loaded only when needed."""
    settings = TeacherSettings(
        config.temperature, config.max_new_tokens, config.step_max_new_tokens, config.max_context_tokens
    )
    if config.type == "policy":
        chosen = policy()
        return EngineTeacher(chosen.version, chosen.engine, chosen.chat, settings)
    if config.type == "local":
        engine, chat = _local_model(config.model, config.dtype, config.device)
        return EngineTeacher(version, engine, chat, settings)
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.openai_engine import OpenAIEngine

    if config.tokenizer is None:
        tokenizer = policy().tokenizer
    else:
        from transformers import AutoTokenizer

        from coevolve.llm.models import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(config.tokenizer))
    engine = OpenAIEngine(config.base_url, config.model, api_key_env=config.api_key_env, tokenizer=tokenizer,
                          token_ids=config.token_ids, timeout_s=config.timeout_s, max_retries=config.max_retries)
    return OpenAITeacher(version, engine, ChatFormat(tokenizer), settings)


@functools.cache
def _local_model(name: str, dtype: str, device: str) -> tuple[Engine, Any]:
    """(engine, chat format) of a local teacher model, loaded once per process."""
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.hf_engine import HfEngine
    from coevolve.llm.models import load_model

    model, tokenizer = load_model(name, dtype=dtype, device=device)
    return HfEngine(model, tokenizer, version=f"local:{name}"), ChatFormat(tokenizer)
