"""What an evolution made of its candidate tasks, counted one way for every view that reports it (the round
line, `coevolve evolution`, tracking, the web view).

    counts = CandidateCounts.of({"ok": 8, "duplicate": 18, "invalid": 5}, {"accept": 1, "discard": 22})
    counts.label()  # '31 candidates: 8 distinct solutions, 18 duplicates, 5 invalid -> 1 accept / 0 retain / 7 discard'

Abstraction gives each candidate a status (`stages.abstract`): `ok` is a distinct solution; `duplicate` another
wording of one (or of a dataset task); `invalid` and `unparsable` are neither. Verification
(`stages.verify.verification.check_solutions`) checks a distinct solution's own wording, then its duplicates'
in turn, until one passes: each wording checked is a `verifications` row, so the rows outnumber the
solutions (23 rows for 8 solutions in the demo). The verdicts here are per distinct solution: a solution is
accepted or retained when one of its wordings was (at most one is), and discarded when none was, so
discard = distinct - accept - retain; the rows are `wordings_checked`. The round line and
`coevolve evolution` print `label()`; `flows.summary.round_metrics` carries the same numbers to tracking
and the Prefect artifacts, and the web view counts the same way from SQL (`count_columns_sql`).
"""

from __future__ import annotations

from dataclasses import dataclass

from coevolve.contracts.abstract import STATUSES
from coevolve.contracts.verify import VERDICTS as OUTCOMES


@dataclass(frozen=True)
class CandidateCounts:
    """One evolution's candidates (a round's, or a run's summed) and their verdicts per distinct solution."""

    candidates: int
    """Every candidate row, whatever its status."""
    distinct: int
    """`ok`: distinct solutions, each verified."""
    duplicates: int
    """`duplicate`: another wording of a distinct solution or of a task the dataset holds."""
    invalid: int
    """`invalid`: a task the environment cannot build or state."""
    unparsable: int
    """`unparsable`: a teacher reply that held no task."""
    accept: int | None
    """Distinct solutions accepted (None: not verified yet)."""
    retain: int | None
    """Distinct solutions retained (admitted, kept for later)."""
    wordings_checked: int | None
    """`verifications` rows: a solution's wordings checked until one passed."""

    @classmethod
    def of(cls, statuses: dict[str, int | None], outcomes: dict[str, int | None] | None) -> CandidateCounts:
        """From the candidates per status and the verification rows per outcome (None: no verification)."""
        n = {s: statuses.get(s) or 0 for s in STATUSES}
        rows = {o: (outcomes or {}).get(o) or 0 for o in OUTCOMES}
        verified = outcomes is not None and any(outcomes.get(o) is not None for o in OUTCOMES)
        return cls(sum(n.values()), n["ok"], n["duplicate"], n["invalid"], n["unparsable"],
                   rows["accept"] if verified else None, rows["retain"] if verified else None,
                   sum(rows.values()) if verified else None)  # fmt: skip

    @property
    def discard(self) -> int | None:
        """Distinct solutions none of whose wordings passed."""
        if self.accept is None or self.retain is None:
            return None
        return max(self.distinct - self.accept - self.retain, 0)

    def label(self) -> str:
        """`31 candidates: 8 distinct solutions, 18 duplicates, 5 invalid -> 1 accept / 0 retain / 7 discard`
        (a status none had is left out; no verdicts before verification)."""
        parts = [f"{self.distinct} distinct solution{'' if self.distinct == 1 else 's'}"]
        parts += [f"{n} {name}" for n, name in ((self.duplicates, "duplicate" if self.duplicates == 1 else "duplicates"),
                                                 (self.invalid, "invalid"), (self.unparsable, "unparsable")) if n]  # fmt: skip
        text = f"{self.candidates} candidate{'' if self.candidates == 1 else 's'}: {', '.join(parts)}"
        if self.accept is None:
            return text
        return f"{text} -> {self.accept} accept / {self.retain} retain / {self.discard} discard"


def count_columns_sql(column: str, values: tuple[str, ...]) -> str:
    """`count(*) FILTER (WHERE column = 'v') AS v` for each of `values` (statuses or verdicts), the counts
    `CandidateCounts.of` takes, in SQL."""
    return ", ".join(f"count(*) FILTER (WHERE {column} = '{v}') AS \"{v}\"" for v in values)
