"""A signal's evidence, the JSON `stages.signals.rules` stores with it, as rows a person can read; what each
field means is its kind's contract (`coevolve.contracts.signals.SignalKind.evidence`).

Each row is {field, value, meaning}: floats to 3 significant digits, and the values that stand for
something else said in words: a rare-signal window that starts before round 0 (`first_round` < 0,
i.e. every round so far counts), a tool the task offers that no action of the window called (count 0).
Fields this module does not know are shown as stored, numbers rounded the same way.
"""

from __future__ import annotations

import json
from typing import Any

from coevolve.contracts.signals import kind_names, signal_kind


def significant(value: Any) -> str:
    """A number for people: floats to 3 significant digits, integers whole; None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{float(f'{value:.3g}'):g}" if isinstance(value, float) else str(value)


def evidence_rows(kind: str, evidence: Any, round_: int) -> list[dict[str, str]]:
    """The evidence of a `kind` signal of round `round_` (JSON text or parsed) as labelled rows."""
    if isinstance(evidence, str):
        try:
            evidence = json.loads(evidence)
        except ValueError:
            return [{"field": "evidence", "value": evidence, "meaning": "as stored (not JSON)"}]
    if not isinstance(evidence, dict):
        return [{"field": "evidence", "value": _plain(evidence), "meaning": ""}]
    meanings = signal_kind(kind).evidence if kind in kind_names() else {}
    rows = []
    for field, value in evidence.items():
        if field == "first_round":
            shown, meaning = window_start(value, round_), meanings.get(field, "")
        elif field == "patterns" and isinstance(value, list):
            shown, meaning = rare_patterns(value), meanings.get(field, "")
        else:
            shown, meaning = _plain(value), meanings.get(field, "")
        rows.append({"field": field, "value": shown, "meaning": meaning})
    return rows


def window_start(first_round: Any, round_: int) -> str:
    """`first_round` = round - W + 1; below 0 the W-round window reaches back past the run's start."""
    if not isinstance(first_round, int) or first_round >= 0:
        return significant(first_round)
    return f"— (the {round_ - first_round + 1}-round window starts before round 0: every round so far counts)"


def rare_patterns(patterns: list[Any]) -> str:
    """One line per pattern: `name: c of N (share)`, a count of 0 said as never called."""
    lines = []
    for p in patterns:
        if not isinstance(p, dict):
            lines.append(_plain(p))
        elif p.get("count") == 0:
            lines.append(f"{p.get('pattern')}: never called in the window (the task offers it)")
        else:
            share = p.get("frequency")
            percent = f" ({significant(share * 100)}% of N)" if isinstance(share, int | float) else ""
            lines.append(f"{p.get('pattern')}: {significant(p.get('count'))}{percent}")
    return "\n".join(lines) or "—"


def _plain(value: Any) -> str:
    """Numbers rounded, nested JSON on one line with its numbers rounded too."""
    if isinstance(value, dict | list):
        return json.dumps(_rounded(value), ensure_ascii=False)
    return significant(value)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.3g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value
