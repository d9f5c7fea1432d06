"""JSON values out of free-text model replies, within size and depth caps; nothing is ever evaluated.

A teacher LLM answers in prose around the JSON it was asked for, sometimes in code fences. `extract_json`
finds the first JSON value of the wanted type by decoding from each `{` / `[` in turn with
`json.JSONDecoder.raw_decode`; a reply without one raises `JsonReplyError`, whose message the caller
records as the row's reason (a bad reply is data, not a crash).

    extract_json('Sure! {"plan": "call list_files"}', dict)    # {'plan': 'call list_files'}
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_REPLY_CHARS = 50_000


MAX_JSON_DEPTH = 20


MAX_JSON_STARTS = 200
"""Most `{`/`[` positions tried per reply, so a hostile reply cannot make parsing quadratic."""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class JsonReplyError(ValueError):
    """A teacher reply without a usable JSON value; the message is the row's `reason`."""


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
    too_deep = False
    for text in [*_FENCE.findall(reply), reply]:
        starts = [i for i, char in enumerate(text) if char in opener][:MAX_JSON_STARTS]
        inside = -1  # end of a value refused as too deep: no fragment of it is taken instead
        for start in starts:
            if start < inside:
                continue
            try:
                value, end = decoder.raw_decode(text, start)
            except (ValueError, RecursionError):
                continue
            if _depth(value) > MAX_JSON_DEPTH:
                too_deep, inside = True, end
            elif expect is None or isinstance(value, expect):
                return value
    wanted = {dict: "JSON object", list: "JSON array"}.get(expect, "JSON value")  # type: ignore[call-overload]
    if too_deep:
        raise JsonReplyError(f"the reply's JSON is nested deeper than {MAX_JSON_DEPTH} levels")
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
