"""What an English query asks for: information or an action, and the literals it names.

Verification compares a synthesized task's query with what its solution does: a read-only solution must
answer a question (`asks_for_information`) and no clause of its query may ask for an action
(`requested_action`); the literals a query names (`query_literals`: numbers, identifiers with a digit,
paths, quoted text) must be used or read by the solution.
"""

from __future__ import annotations

import re

_CLAUSE_START = (r"(?:^|[.;:!?]\s+|,?\s+(?:and|then)\s+)\s*(?:let's\s+)?(?:please\s+|(?:can|could|would|will) you\s+)?"
                 r"(?:kindly\s+)?")
"""Where a sentence or clause of a query starts, with an optional "let's", "please", "could / would / will
you" and "kindly"."""


_INFORMATION_REQUEST = re.compile(
    _CLAUSE_START + r"(what|which|how|who|whose|when|where|why|is|are|was|were|does|do|did|can|could|tell|show"
    r"|list|find|check|look|get|read|give|fetch|display|retrieve|search)\b",
    re.IGNORECASE,
)
"""A sentence or clause of a query that asks for information ("Tell me ...", "... and show me ...")."""


_ACTION_REQUEST = re.compile(
    _CLAUSE_START + r"(add|append|book|buy|cancel|copy|create|delete|deposit|fill|forward|initiate|integrate|lock|make"
    r"|message|move|order|pay|post|purchase|put|remove|rename|reply|reschedule|save|schedule|send|set|share|start"
    r"|text|transfer|unlock|update|upload|withdraw|write)\b",
    re.IGNORECASE,
)
"""A sentence or clause of a query that asks for an action ("Buy ...", "... and send ...")."""


_QUERY_LITERAL = re.compile(
    r"(?<![\w'])'([^'\n]{1,80})'(?![\w'])"  # 'quoted text' (not an apostrophe)
    r'|"([^"\n]{1,80})"'  # "quoted text"
    r"|((?<![\w.])/[\w./-]*\w)"  # /a/path
    r"|([\w.-]*\d[\w.-]*)"  # a number or an identifier with a digit: 125.39, TRV-4, 2026-12-01
)


def asks_for_information(query: str) -> bool:
    """Whether a query asks a question or for information ("What is ...?", "Show me ...", "Read ..."),
    rather than for an action ("Transfer ...", "Copy ...")."""
    return query.rstrip().endswith("?") or _INFORMATION_REQUEST.search(query) is not None


def requested_action(query: str) -> str | None:
    """The verb of the first sentence or clause of a query that asks for an action ("Buy 9 x P-435 and tell
    me the total." -> "Buy"), if any."""
    match = _ACTION_REQUEST.search(query)
    return match.group(1) if match else None


def query_literals(query: str) -> list[str]:
    """Numbers, identifiers with a digit, paths and quoted text the query names, in order."""
    found = (next(g for g in m.groups() if g is not None) for m in _QUERY_LITERAL.finditer(query))
    return list(dict.fromkeys(v.strip().rstrip(".-") for v in found if v.strip().rstrip(".-")))
