"""The tool a signal names, and how an exploration is pointed at it (extensions, not the paper's).

An `unused` signal names the tool that no trajectory of the window called; a rare signal of tool patterns
names its rarest tool (`signal_tool`). With `explore.named_tool_context` the exploration context holds that
tool's full schema and an argument-free listing of its app among the episode's offered tools
(`with_named_tool`, `app_listing`), and the explore prompt asks for it (`explore_named_tool`). With
`explore.prefill_named_tool` the teacher's first reply of each episode starts with a call of it
(`call_prefix`, `PrefilledEngine`), as the reflection's reply starts with its JSON; with
`explore.prefill_listing_first` the first reply calls its app's listing (with `explore.prefill_listing_call`,
that whole call is the reply) and the second the named tool.

Which tools share an app is read from the offered tools alone, so that any environment works: a tool name
`app__tool` or `app.tool` names its app; otherwise a listing shares the most name words with the tool's
name and parameters (`get_balance(account_id)` and `list_accounts`), then stands nearest it in the offered
order (an environment lists an app's tools together, as the tool world's catalog does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from coevolve.core import ToolCall
from coevolve.llm.engine import Completion, Engine, SamplingParams
from coevolve.llm.toolcalls import CLOSE, render_tool_call

LISTING_VERBS = ("list", "view")
"""A listing's name starts with one of these words (`list_accounts`, `view_cart`) and it takes no argument."""
APP_SEPARATORS = ("__", ".")
GENERIC_WORDS = frozenset({
    "id", "ids", "e", "g", "eg", "get", "set", "show", "list", "view", "one", "all", "only", "optionally", "new",
    "by", "from", "to", "of", "the", "a", "an", "and", "or", "in", "on", "into", "out", "with", "that", "this",
    "its", "their", "has", "not", "yet", "no", "is", "be", "can", "may", "for", "at", "it", "if", "those",
})


def signal_tool(kind: str, evidence: str | None) -> str | None:
    """The tool a signal names: an `unused` signal's tool, or a rare signal's rarest tool pattern (rare
    patterns are sorted by count, then name); None for any other signal."""
    try:
        payload = json.loads(evidence or "")
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    if kind == "unused" and isinstance(payload.get("tool"), str):
        return payload["tool"]
    if kind == "rare" and payload.get("pattern_kind") == "tool" and payload.get("patterns"):
        first = payload["patterns"][0]
        return first.get("pattern") if isinstance(first, dict) and isinstance(first.get("pattern"), str) else None
    return None


def _spec(tool: dict) -> dict:
    return tool.get("function", tool)


def takes_no_argument(tool: dict) -> bool:
    return not (_spec(tool).get("parameters") or {}).get("required")


def _base(name: str) -> str:
    """The name without its app prefix (`spotify__show_song` -> `show_song`)."""
    for separator in APP_SEPARATORS:
        name = name.split(separator, 1)[-1]
    return name


def is_listing(tool: dict) -> bool:
    """An argument-free tool whose name starts with a listing verb (`list_accounts`, `view_cart`)."""
    verb = re.split(r"[^a-z0-9]+", _base(_spec(tool)["name"]).lower())[0]
    return takes_no_argument(tool) and verb in LISTING_VERBS


def _app(name: str) -> str | None:
    for separator in APP_SEPARATORS:
        if separator in name:
            return name.split(separator, 1)[0]
    return None


def _words(text: str) -> set[str]:
    """Name words, singular (`accounts` -> `account`), without generic ones (`id`, `get`, ...)."""
    words = {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w and w not in GENERIC_WORDS}
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words}


def app_listing(tools: list[dict], name: str) -> str | None:
    """An argument-free listing of `name`'s app among the offered `tools` (see the module docstring); None
    when there is none, or when `name` is one itself."""
    names = [_spec(t)["name"] for t in tools]
    if name not in names:
        return None
    spec = _spec(tools[names.index(name)])
    listings = [i for i, t in enumerate(tools) if is_listing(t) and names[i] != name
                and _app(names[i]) == _app(name)]  # fmt: skip
    if not listings or is_listing(spec):
        return None
    own = _words(_base(name)) | {w for p in (spec.get("parameters") or {}).get("properties") or {} for w in _words(p)}
    told = own | _words(spec.get("description") or "")
    here = names.index(name)

    def rank(i: int) -> tuple[int, int, int, str]:
        other = _spec(tools[i])
        named = _words(_base(names[i]))
        return (-len(own & named), -len(told & (named | _words(other.get("description") or ""))), abs(i - here),
                names[i])

    return names[min(listings, key=rank)]


def with_named_tool(context: dict, tools: list[dict], name: str) -> dict:
    """`context` with the named tool's full schema and its app's listing (`named_tools`,
    `named_tool_schema`, `listing`); unchanged when the episode does not offer the tool."""
    offered = {_spec(t)["name"]: _spec(t) for t in tools}
    if name not in offered:
        return context
    return {**context, "named_tools": [name], "named_tool_schema": offered[name],
            "listing": app_listing(tools, name)}  # fmt: skip


def call_prefix(name: str, tools: list[dict] | None = None, *, quote: bool = False) -> str:
    """The start of a reply that calls `name`, up to its arguments: `<tool_call>\\n{"name": "x", "arguments": `;
    given the offered `tools`, on into the arguments object up to the value of the tool's first required
    parameter (`{"p": `), or its first parameter, or `{` for a tool that takes none; `quote`: a string
    parameter's value opened too (`{"p": "`)."""
    full = render_tool_call(ToolCall(name=name, arguments={}))
    cut = full.index('"arguments": ') + len('"arguments": ')
    if tools is None:
        return full[:cut]
    offered = {_spec(t)["name"]: _spec(t) for t in tools}
    parameters = (offered.get(name, {}).get("parameters") or {})
    names = [*(parameters.get("required") or []), *(parameters.get("properties") or {})]
    if not names:
        return full[:cut] + "{"
    string = ((parameters.get("properties") or {}).get(names[0]) or {}).get("type") == "string"
    return full[:cut] + "{" + json.dumps(names[0]) + ": " + ('"' if quote and string else "")


def reply_prefixes(name: str, tools: list[dict], *, arguments: bool, listing: str | None,
                   whole_listing: bool = False) -> tuple[str, ...]:  # fmt: skip
    """How an episode's first replies start when its signal names `name` (`PrefilledEngine`): one reply
    calling it (`arguments`: opened at its first parameter, `call_prefix`), or, given its app's `listing`,
    a first reply calling the listing and a second calling `name` with its first value opened, so the
    values the call needs are in the episode before it is made. `whole_listing`: the listing's reply is its
    whole call (`{"name": listing, "arguments": {}}`, a complete reply the engine does not continue): a small
    teacher left to write an argument-free call's arguments writes `0`, a malformed call whose ids never
    reach the episode."""
    if listing:
        first = render_tool_call(ToolCall(name=listing, arguments={})) if whole_listing else call_prefix(listing)
        return first, call_prefix(name, tools, quote=True)
    return (call_prefix(name, tools if arguments else None),)


def is_whole_reply(prefix: str) -> bool:
    """A prefix that is a complete reply: it ends with a tool call's closing tag (`reply_prefixes`'s
    `whole_listing`)."""
    return prefix.rstrip().endswith(CLOSE)


@dataclass
class PrefilledEngine:
    """An engine whose n-th reply in each session starts with `prefixes[n]` (assistant prefill): the prefix
    ids are appended to the prompt, and returned as part of the completion (log-prob 0, as prompt tokens
    are), so the episode's token stream holds what the engine was given; a prefix that is a whole reply
    (`is_whole_reply`) is the reply. Later replies are the inner engine's."""

    inner: Engine
    prefixes: tuple[str, ...]
    encode: Callable[[str], list[int]]
    end_id: int | None = None
    """The end-of-turn id that closes a whole reply (`is_whole_reply`), which the inner engine does not
    continue; None: such a reply ends without it, as one cut at its length."""
    replies: dict = field(default_factory=dict)

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    @property
    def version(self) -> str:
        return self.inner.version

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, *,
                 progress: Callable[[int], None] | None = None,
                 sessions: list[Hashable] | None = None) -> list[Completion]:  # fmt: skip
        if sessions is None:
            raise ValueError("a prefilled engine needs the episodes' sessions to count their replies")
        texts = [self._next_prefix(s) for s in sessions]
        ids = [self.encode(text) if text else [] for text in texts]
        going = [k for k, text in enumerate(texts) if not is_whole_reply(text)]  # a whole reply is not continued
        primed = [prompts[k] + ids[k] for k in going]
        out = dict(zip(going, self.inner.generate(primed, sampling, progress=progress,
                                                  sessions=[sessions[k] for k in going]) if primed else [],
                       strict=True))  # fmt: skip
        return [self._completed(out.get(k), ids[k], texts[k]) for k in range(len(prompts))]

    def _completed(self, c: Completion | None, ids: list[int], text: str) -> Completion:
        """The reply: the prefix and the inner engine's continuation (none for a whole reply)."""
        if c is None:
            if self.end_id is None:
                return Completion(ids, [0.0] * len(ids), text, "length", self.inner.version)
            return Completion([*ids, self.end_id], [0.0] * (len(ids) + 1), text, "stop", self.inner.version)
        if not text:
            return c
        return Completion(ids + c.token_ids, [0.0] * len(ids) + c.logprobs, text + c.text, c.finish_reason, c.version)

    def _next_prefix(self, session: Hashable) -> str:
        n = self.replies.get(session, 0)
        self.replies[session] = n + 1
        return self.prefixes[n] if n < len(self.prefixes) else ""

    def end_sessions(self, sessions: list[Hashable]) -> None:
        self.inner.end_sessions(sessions)

    def update_weights(self, source: Any) -> None:
        self.inner.update_weights(source)
