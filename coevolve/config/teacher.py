"""The teacher's config sections (`teacher`): the policy itself, a local checkpoint, or an OpenAI-compatible
server; and the rule for the environment variable that may hold an API key (`api_key_env`)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from coevolve.config.section import Section

API_KEY_ENV = re.compile(r"[A-Z][A-Z0-9_]*_API_KEY")
"""The names `api_key_env` accepts (whole name): upper case, ending in `_API_KEY`."""


def _key_variable(value: str | None) -> str | None:
    if value is not None and not API_KEY_ENV.fullmatch(value):
        raise ValueError(f"{value!r} is not an API key variable: the name must be upper case and end in _API_KEY "
                         "(e.g. OPENAI_API_KEY, VLLM_API_KEY; export MY_API_KEY=... to use another one)")  # fmt: skip
    return value


class InProcessTeacherSampling(Section):
    """Sampling settings of a teacher that generates in this process."""

    temperature: float = Field(0.7, gt=0.0, le=10.0)
    """Sampling temperature of reflections, abstractions and exploration replies."""
    max_new_tokens: int = Field(512, ge=1, le=131_072)
    """Cap on tokens per reflection or abstraction reply."""
    step_max_new_tokens: int = Field(128, ge=1, le=131_072)
    """Cap on tokens per exploration reply (one tool-calling step)."""
    max_context_tokens: int = Field(4096, ge=64, le=1_048_576)
    """An exploration episode whose context would exceed this ends."""


SERVER_FIELDS = ("base_url", "api_key_env", "tokenizer", "token_ids", "timeout_s", "max_retries")
"""The fields of an `openai` teacher that say how its server is reached: a section switched to a teacher
that generates in this process (`--set teacher.type=policy` on a paper config) has no server of its own."""


def _without_server(data: Any, fields: tuple[str, ...]) -> Any:
    """`data` without an `openai` section's server fields (`fields`), its sampling settings kept."""
    return {k: v for k, v in data.items() if k not in fields} if isinstance(data, dict) else data


class PolicyTeacherConfig(InProcessTeacherSampling):
    """The policy itself is the teacher: it generates with the policy's engine and chat template, on the
    policy's servers (`model.servers`) when the policy is served, else in this process (the CPU default).
    The paper's weaker-explorer ablation on a paper config: `--set teacher.type=policy` keeps the section's
    sampling settings and sets its server (`base_url`, `model`, ...) aside, since the policy's own serves."""

    type: Literal["policy"] = "policy"
    """Backend selector."""

    @model_validator(mode="before")
    @classmethod
    def _policy_serves(cls, data: Any) -> Any:
        return _without_server(data, (*SERVER_FIELDS, "model"))


class LocalTeacherConfig(InProcessTeacherSampling):
    """Another model loaded in this process with fixed weights: a separately trained teacher checkpoint,
    or a bigger model next to the policy on a GPU, without a server."""

    type: Literal["local"] = "local"
    """Backend selector."""
    model: str = Field(min_length=1)
    """`llm.models` name, a local checkpoint directory or a hub id (required). Its name is the teacher's
    version in cache keys: rewriting a checkpoint in place does not invalidate cached stages."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights dtype."""
    device: str = "cpu"
    """Torch device."""

    @model_validator(mode="before")
    @classmethod
    def _loaded_here(cls, data: Any) -> Any:
        return _without_server(data, SERVER_FIELDS)


class OpenAITeacherConfig(Section):
    """A stronger model behind an OpenAI-compatible server (vLLM, SGLang, hosted): the paper's setting."""

    type: Literal["openai"] = "openai"
    """Backend selector."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including `/v1`."""
    model: str = Field(min_length=1)
    """Model name the server knows (required)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (unset = no Authorization header). Only names matching
    `API_KEY_ENV` (upper case, ending in `_API_KEY`): a config cannot send another secret of the environment
    (`GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, ...) to the server. The key goes only over https or to a
    loopback address (never through a proxy)."""
    tokenizer: str | None = None
    """Model name whose tokenizer renders exploration episodes (`llm.models` names, a local dir or a hub
    id); None = the policy's tokenizer."""
    token_ids: bool = False
    """The server uses that same tokenizer: send prompts as token ids (vLLM). Else prompts go as text."""
    temperature: float = Field(0.7, gt=0.0, le=10.0)
    """Sampling temperature of reflections, abstractions and exploration replies."""
    max_new_tokens: int = Field(1024, ge=1, le=131_072)
    """Cap on tokens per reflection or abstraction reply."""
    step_max_new_tokens: int = Field(256, ge=1, le=131_072)
    """Cap on tokens per exploration reply."""
    max_context_tokens: int = Field(8192, ge=64, le=1_048_576)
    """An exploration episode whose context would exceed this ends."""
    timeout_s: float = Field(120.0, gt=0.0, le=86_400.0)
    """HTTP timeout per request."""
    max_retries: int = Field(3, ge=0, le=100)
    """Retries of a request on connection errors, timeouts, 429 and 5xx (exponential backoff)."""

    _key_env = field_validator("api_key_env")(_key_variable)


def _teacher_type(value: Any) -> str:
    """The `type` tag of a teacher section; a section that names no type is the policy teacher."""
    return value.get("type", "policy") if isinstance(value, dict) else getattr(value, "type", "policy")


TeacherConfig = Annotated[
    Annotated[PolicyTeacherConfig, Tag("policy")]
    | Annotated[LocalTeacherConfig, Tag("local")]
    | Annotated[OpenAITeacherConfig, Tag("openai")],
    Discriminator(_teacher_type),
]
