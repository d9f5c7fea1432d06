"""A read-only call's task opened as a question (`abstract.prefill_question`, an extension, not the paper's).

A small teacher words a read-only call as an instruction ("Send Quinn a message" over `get_contact`), which
verification discards as `no effect`, or as a question naming not the id the call needs (`unsolvable`).
`question_prefix` writes the start of the abstraction reply for it: the solution and the opening of a
question that names the call's argument values; the teacher writes what is asked for and the answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from coevolve.envs.base import literal_values
from coevolve.stages.abstract.prompting import ABSTRACT_PREFIX

QUESTION_OPENER = "Look up the {object} {values} and tell me the "
"""How `question_prefix` opens a read-only call's query: a request for information (`Look up`, `tell me`)
that names the call's object (its tool's name past the verb) and every argument value, so the task is
solvable from its query alone; the teacher says what is asked for."""


def _read_only_with_arguments(call: dict) -> bool:
    return call.get("changed") is False and bool(literal_values(call["arguments"]))


def _spelled(value: object) -> str:
    """An argument value as a query names it: a one-word value bare (`P-301`, `Quinn`), others quoted."""
    text = value.strip() if isinstance(value, str) else json.dumps(value)
    return text if re.fullmatch(r"[\w.@/:+-]+", text) else f"'{text}'"


def question_opener(call: dict) -> str:
    """The start of a query asking for what a read-only `call` reads (`QUESTION_OPENER`)."""
    words = [w for w in re.split(r"[^a-z0-9]+", call["tool"].lower()) if w]
    return QUESTION_OPENER.format(object=" ".join(words[1:]) or words[0],
                                  values=" and ".join(_spelled(v) for v in literal_values(call["arguments"])))


def question_prefix(calls: Sequence[dict]) -> str | None:
    """`abstract.prefill_question` (extension, not the paper's): the reply's start for a group holding a
    read-only call that takes arguments, its solution and the opening of its query written for the teacher
    (`question_opener`), the answers left to it (or, if it names none, to verification's reading of the
    call's result). One call: the solution `[0]`. Several: the first such call whose every argument value
    an earlier read-only call's result shows, after that call (`[i, j]`: the listing that showed the id,
    then the lookup). None (the ordinary start) for any other group. Without it a small teacher words a
    read-only call as an instruction ("Send Quinn a message" over `get_contact`), or a question that names
    not the id the call needs."""
    if len(calls) == 1:
        solution = [0] if _read_only_with_arguments(calls[0]) else None
    else:
        solution = next(([i, j] for j, call in enumerate(calls) if _read_only_with_arguments(call)
                         for i in range(j) if calls[i].get("changed") is False and _shows_values(calls[i], call)),
                        None)  # fmt: skip
    if solution is None:
        return None
    opener = json.dumps(question_opener(calls[solution[-1]]))[1:-1]  # inside the query's JSON string
    return ABSTRACT_PREFIX + ", ".join(map(str, solution)) + '], "query": "' + opener


def _shows_values(earlier: dict, call: dict) -> bool:
    """Every argument value of `call` appears in `earlier`'s result."""
    seen = str(earlier.get("observation") or "").lower()
    return all(str(v).strip().lower() in seen for v in literal_values(call["arguments"]))
