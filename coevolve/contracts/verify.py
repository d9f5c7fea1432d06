"""The `verify` phase's contract: its verdicts, the reasons a verdict gives, its `verifications` schema and
what its manifest reports.

A verdict is one of `Verdict` (closed: merge admits by it). Its reason is text that starts with a code
(`replay: 2 call(s) did not run`); the codes are `VerdictReason` records in one registry, so a package that
adds a verification check adds its reason with the check, one call of the verify phase
(`stages.verify.checks.add_check(check, reason)`), and its discards are counted under its code in the
manifest (`VerifyOutputs.discard_reasons`), the round summary, tracking (`evolution/discarded/<code>`), the
web view and SQL (`reason_code_sql`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from coevolve.contracts.phase import Writes
from coevolve.contracts.registry import Registry

if TYPE_CHECKING:
    import pyarrow as pa


class Verdict(StrEnum):
    """A verification row's `outcome`."""

    ACCEPT = "accept"
    """Admitted: the reference solution satisfies its checker (or the policy solved it)."""
    RETAIN = "retain"
    """Admitted and kept for later: a failure that did part of the task."""
    DISCARD = "discard"
    """Not admitted; the reason says why."""


VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)
ADMITTED: tuple[str, ...] = (Verdict.ACCEPT.value, Verdict.RETAIN.value)
"""The verdicts the paper admits (`merge.admit`'s default)."""


def sql_list(values: Iterable[str]) -> str:
    """`('accept', 'retain')`: values as a SQL list."""
    return "(" + ", ".join(_quoted(v) for v in values) + ")"


@dataclass(frozen=True)
class VerdictReason:
    """A code a verdict's reason starts with, and what it means."""

    code: str
    meaning: str
    prefix: str = ""
    """The text a reason of this code starts with (default `<code>:`)."""

    @property
    def starts(self) -> str:
        return self.prefix or f"{self.code}:"

    @property
    def output(self) -> str:
        """Its discards' count in the round summary and tracking."""
        return "discarded_" + re.sub(r"\W+", "_", self.code)


OTHER = "other"
"""The code of a reason no registered code starts."""

REASONS: Registry[VerdictReason] = Registry("verdict reason", lambda r: r.code, (
    VerdictReason("replay", "a call of the solution fails, or an answer is in no result of it"),
    VerdictReason("no effect", "the solution changes nothing, and the query asks for no answer it reads"),
    VerdictReason("unasked effect", "the solution changes the state, the query only asks for information"),
    VerdictReason("contamination", "a near-duplicate of a held-out task, or it checks what one checks"),
    VerdictReason("leaked", "the query states the answer"),
    VerdictReason("misread", "the answer is another object's value than the one the query names"),
    VerdictReason("unsolvable", "a value a call needs is neither in the query nor in an earlier result"),
    VerdictReason("ungrounded", "the solution uses too few of the query's literals"),
    VerdictReason("checker", "the reference solution does not satisfy the derived checker"),
    VerdictReason("error", "the environment failed while checking"),
    VerdictReason("executed", "the reference solution was executed against its checker (verify.judge: execution)"),
    VerdictReason("policy", "the policy's attempts decided (verify.judge: policy)", prefix="the policy "),
    VerdictReason("unverified", "admitted without verification (verify.enabled: false)", prefix="admitted without"),
))
add_reason, remove_reason = REASONS.add, REASONS.remove


def reasons() -> tuple[VerdictReason, ...]:
    return REASONS.items()


def reason_code(text: str | None) -> str:
    """The code `text` starts with (the longest that fits), or `OTHER`."""
    fits = [r for r in REASONS.items() if (text or "").startswith(r.starts)]
    return max(fits, key=lambda r: len(r.starts)).code if fits else OTHER


def reason_code_sql(column: str = "reason") -> str:
    """`reason_code` as a DuckDB expression over `column`."""
    cases = sorted(REASONS.items(), key=lambda r: -len(r.starts))
    whens = " ".join(f"WHEN starts_with({column}, {_quoted(r.starts)}) THEN {_quoted(r.code)}" for r in cases)
    return f"(CASE {whens} ELSE {_quoted(OTHER)} END)"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class VerifyOutputs:
    """What a `verify` run reports in its manifest: its rows per verdict, and its discards per reason code."""

    outcomes: Mapping[str, int] = field(default_factory=dict, hash=False)
    discard_reasons: Mapping[str, int] = field(default_factory=dict, hash=False)

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> VerifyOutputs:
        rows = list(rows)
        outcomes = Counter(r["outcome"] for r in rows)
        discarded = Counter(reason_code(r["reason"]) for r in rows if r["outcome"] == Verdict.DISCARD.value)
        return cls({v: outcomes[v] for v in VERDICTS}, dict(sorted(discarded.items())))

    def manifest(self) -> dict[str, Any]:
        return {**self.outcomes, "discard_reasons": dict(self.discard_reasons)}

    @staticmethod
    def discards(outputs: Mapping[str, Any]) -> dict[str, int | None]:
        """A manifest's discards of every declared reason code and `other`, under each code's `output` name
        (None: no verification, or one from before they were recorded)."""
        found = outputs.get("discard_reasons")
        return {name: None if found is None else found.get(code, 0) for code, name in reason_outputs().items()}


def reason_outputs() -> dict[str, str]:
    """Every declared reason code and `other` -> its count's name in the round summary."""
    return {**{r.code: r.output for r in REASONS.items()}, OTHER: VerdictReason(OTHER, "").output}


WRITES = Writes(("verifications", "trajectories", "steps"), VerifyOutputs)
"""What the `verify` stages write: the verdicts, and the policy's attempts as episodes of source `verify`."""


def verifications_schema() -> pa.Schema:
    """The `verifications` artifact: one row per candidate wording checked."""
    import pyarrow as pa

    from coevolve.contracts.arrow import artifact_schema

    return artifact_schema(
        1,
        pa.field("verification_id", pa.string(), nullable=False),
        pa.field("candidate_id", pa.string(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),  # a `Verdict`
        pa.field("reason", pa.string(), nullable=False),  # starts with a `VerdictReason` code
        pa.field("reward", pa.float64()),  # best policy attempt; null when not attempted
        pa.field("success", pa.bool_()),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("policy_version", pa.string(), nullable=False),
        pa.field("checker", pa.string()),  # JSON checker spec of the task
        pa.field("expected_digest", pa.string()),  # state digest after replaying the solution
        pa.field("task_id", pa.string()),  # the synthesized task (accept / retain)
        pa.field("task", pa.string()),  # JSON task row that merge admits
    )
