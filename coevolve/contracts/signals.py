"""The `signals` phase's contract: its signal kinds, its `signals` schema and what its manifest reports.

A signal kind is a `SignalKind` record in one registry. The paper's three (forgetting, boundary, rare) and
the `unused` extension are declared here; a package adds another with one call, the signals phase's
`stages.signals.rules.add_rule(kind, rule)`, and from then on `signals.kinds` accepts it, the round line
counts it under its letter, tracking logs `evolution/<kind>_signals`, the web view has its column and
explains its evidence, and its rows are in the `signals` view:

    add_rule(SignalKind("stuck", "s", "the same call twice in a row", evidence={"call": "the repeated call"}),
             stuck_signals)

The manifest of a `signals` run reports `signals` (every row) and `<kind>_signals` for each kind the config
asked for (`SignalsOutputs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coevolve.contracts.phase import Writes
from coevolve.contracts.registry import Registry

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class SignalKind:
    """One kind of weakness signal, as every view names and explains it."""

    name: str
    """The `kind` column's value and the name `signals.kinds` lists."""
    letter: str
    """Its letter in the round line's mix, `signals 3/1/0 (f/b/r)`."""
    about: str
    """What it marks, a phrase for the web view (`forgetting (solved before, failed now)`)."""
    paper: bool = False
    """One of the paper's kinds (the default of `signals.kinds`); the others are extensions."""
    evidence: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Its `evidence` JSON's fields and what each means (the web view's evidence table)."""

    @property
    def output(self) -> str:
        """Its count's name in the stage manifest, the round summary and tracking."""
        return f"{self.name}_signals"


FORGETTING = SignalKind("forgetting", "f", "solved before, failed now", paper=True, evidence={
    "score": "mean reward of the task's samples this round (< 0.5: failed)",
    "best_score": "best mean reward over its earlier attempted rounds in the window (>= 0.5: solved)",
    "best_round": "the most recent round that reached that best",
    "attempts": "earlier rounds in the window the task was attempted in",
})
BOUNDARY = SignalKind("boundary", "b", "some of a task's samples succeed", paper=True, evidence={
    "successes": "samples this round with reward > 0.5",
    "failures": "samples this round with reward < 0.5",
    "samples": "samples of the task this round",
    "mean": "mean reward of those samples",
})
RARE = SignalKind("rare", "r", "an unusual action", paper=True, evidence={
    "pattern_kind": "what is counted: a tool name, or a bigram a>b of consecutive calls",
    "total": "actions counted in the window (N)",
    "first_round": "the window's first round (it ends at the signal's round)",
    "patterns": "the rare patterns this trajectory used: count c in the window, c / N",
})
UNUSED = SignalKind("unused", "u", "a tool the tasks offer that no call of the window names", evidence={
    "tool": "the tool no call of the window names",
    "offered_trajectories": "this round's trajectories whose task offers it",
    "offered_tasks": "their tasks",
    "window_calls": "calls of it in the window (0)",
    "first_round": "the window's first round (it ends at the signal's round)",
})

KINDS: Registry[SignalKind] = Registry("signal kind", lambda k: k.name, (FORGETTING, BOUNDARY, RARE, UNUSED))
add_signal_kind, remove_signal_kind = KINDS.add, KINDS.remove


def signal_kinds() -> tuple[SignalKind, ...]:
    """Every kind: the paper's first, then the extensions in the order they were declared."""
    return (*(k for k in KINDS.items() if k.paper), *(k for k in KINDS.items() if not k.paper))


def signal_kind(name: str) -> SignalKind:
    if (kind := KINDS.get(name)) is None:
        raise KeyError(f"unknown signal kind {name!r}; known: {', '.join(kind_names())}")
    return kind


def kind_names() -> tuple[str, ...]:
    return tuple(k.name for k in signal_kinds())


def paper_kinds() -> tuple[str, ...]:
    """The paper's kinds, the default of `signals.kinds`."""
    return tuple(k.name for k in signal_kinds() if k.paper)


def check_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """`kinds` if every one is declared, else ValueError naming the unknown ones and the known."""
    unknown = sorted(set(kinds) - set(kind_names()))
    if unknown:
        raise ValueError(f"unknown signal kind(s) {unknown}; expected a subset of {list(kind_names())}")
    return kinds


@dataclass(frozen=True)
class SignalsOutputs:
    """What a `signals` run reports in its manifest: every row, and the rows of each kind it asked for."""

    signals: int
    by_kind: Mapping[str, int] = field(default_factory=dict, hash=False)

    def manifest(self) -> dict[str, int]:
        return {"signals": self.signals, **{signal_kind(k).output: n for k, n in self.by_kind.items()}}

    @staticmethod
    def counts(outputs: Mapping[str, Any]) -> dict[str, int | None]:
        """A manifest's count of every declared kind, by `output` name (None: the run did not ask for it)."""
        return {k.output: outputs.get(k.output) for k in signal_kinds()}


WRITES = Writes(("signals",), SignalsOutputs)
"""What the `signals` stage writes."""


def signals_schema() -> pa.Schema:
    """The `signals` artifact: one row per (kind, marked trajectory)."""
    import pyarrow as pa

    from coevolve.contracts.arrow import artifact_schema

    return artifact_schema(
        1,
        pa.field("signal_id", pa.string(), nullable=False),  # hash of {kind, round, task_id, trajectory_id}
        pa.field("kind", pa.string(), nullable=False),  # a `SignalKind` name
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("trajectory_id", pa.string(), nullable=False),  # the marked rollout trajectory
        pa.field("trajectory_round", pa.int32(), nullable=False),  # round of that trajectory
        pa.field("evidence", pa.string(), nullable=False),  # JSON, the kind's `evidence` fields
    )
