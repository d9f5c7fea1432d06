"""Whether a required answer value appears in a reply: numbers by value, other text case-insensitively.

The tool world's checker scores final answers with it, and verification uses it to see whether a
synthesized task's answers appear in what its solution read: "1520.5", "1,520.50" and "1520.50" all match
a money answer "1520.50".
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


_NUMERIC_ANSWER = re.compile(r"^\d+(?:\.\d+)?$")


def answer_found(answer: str, reply: str | None) -> bool:
    """Whether `answer` appears in `reply`: numbers compared by value, other text case-insensitively."""
    if not reply:
        return False
    if _NUMERIC_ANSWER.match(answer):
        wanted = float(answer)
        return any(abs(float(token.replace(",", "")) - wanted) < 1e-9 for token in _NUMBER.findall(reply))
    return answer.lower() in reply.lower()
