"""The `abstract` phase's contract: its candidates' statuses and its `candidates` schema.

Its manifest reports its rows per status (`AbstractOutputs`): `ok` is a distinct solution, which
verification checks; `duplicate` another wording of one (or of a dataset task); `invalid` and
`unparsable` are neither.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from coevolve.contracts.phase import Writes

if TYPE_CHECKING:
    import pyarrow as pa


class CandidateStatus(StrEnum):
    """A `candidates` row's `status`."""

    OK = "ok"
    """A distinct solution, verified."""
    UNPARSABLE = "unparsable"
    """A teacher reply that held no task."""
    INVALID = "invalid"
    """A task the environment cannot build or state."""
    DUPLICATE = "duplicate"
    """Another wording of a distinct solution, or of a task the dataset holds."""


STATUSES: tuple[str, ...] = tuple(s.value for s in CandidateStatus)


def abstract_outputs(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """An `abstract` run's manifest: its rows per status, every status named."""
    counts = Counter(r["status"] for r in rows)
    return {s: counts[s] for s in STATUSES}


WRITES = Writes(("candidates",))
"""What the `abstract` stages write (their manifest: `abstract_outputs`)."""


def candidates_schema() -> pa.Schema:
    """The `candidates` artifact: one row per task the teacher abstracted, whatever became of it."""
    import pyarrow as pa

    from coevolve.contracts.arrow import artifact_schema

    return artifact_schema(
        1,
        pa.field("candidate_id", pa.string(), nullable=False),  # content hash
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("exploration_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),  # the explored task (its initial state is reused)
        pa.field("env", pa.string(), nullable=False),
        pa.field("teacher", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # a `CandidateStatus`
        pa.field("reason", pa.string()),  # why not ok; on an ok row, a repair of the reply (`repair_answers`)
        pa.field("duplicate_of", pa.string()),  # candidate or dataset task id
        pa.field("intent", pa.string()),
        pa.field("query", pa.string()),
        pa.field("solution", pa.string()),  # JSON list of {name, arguments}
        pa.field("answers", pa.string()),  # JSON list of strings the reply must contain
        pa.field("signature", pa.string()),  # normalised solution signature
        pa.field("initial_state", pa.string(), nullable=False),  # JSON
        pa.field("raw_reply", pa.string(), nullable=False),  # the teacher's reply this row was parsed from
    )
