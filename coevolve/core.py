"""Shared ids and small types that every layer may import (storage, envs, llm, rl and up).

- `content_hash`: the stable id of any JSON-able payload (tasks, candidates, cache keys, signals).
- `round_seed`: the seed of one purpose (rollout, eval, explore, ...) in one round of a run.
- `ToolCall`: one call of a tool by name with keyword arguments; what parsers produce and environments run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def content_hash(payload: Any, *, length: int = 16) -> str:
    """Stable hex digest of a JSON-serialisable payload (dict keys sorted)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def round_seed(seed: int, round_: int, purpose: str) -> int:
    """The seed of `purpose` in round `round_` of a run seeded with `seed`."""
    return int(content_hash([seed, round_, purpose], length=8), 16)


class ToolCall(BaseModel):
    """One call of a tool by name with keyword arguments (positional ones are mapped by the parser)."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def signature(self) -> str:
        """A canonical one-line rendering, used for display and for n-gram statistics."""
        args = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(self.arguments.items()))
        return f"{self.name}({args})"
