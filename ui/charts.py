"""The chart specs the pages hand to `static/charts.js`, which draws them with uPlot.

A spec is JSON: {key, title, kind, y, x, series, references}.

- `kind`: "lines" for curves over rounds (success, reward, loss, KL, dataset size), "bars" for counts per
  round (signals by kind, verification verdicts): one bar per series at each round.
- `y`: "fraction" (drawn 0-100%), "count" (from zero, whole-number ticks) or "value" (fitted to the data).
- `x`: the integer rounds with data; charts.js spans exactly those (half a round either side, so one
  round is a point in the middle, not at the edge of a 0-100 axis) and labels whole rounds only.
- `series`: each {label, values, colour}: a run's colour from `PALETTE` by its place, a verdict's its
  meaning's (`VERDICT_COLOURS`: accept green, retain amber, discard grey), so no discard is drawn green.
- `references`: dashed horizontal lines, each {label, value, series} (`series`: whose colour). The
  held-out chart has one per run: its zero-shot success, the initial policy's before any training. Their
  labels are the figure's legend (`macros.chart`), never text on the plot, where two runs' labels would
  overlap each other and the points near them.
"""

from __future__ import annotations

from typing import Any

from coevolve.ui.queries import CURVES, SAMPLING_NAMES

PALETTE = ("#2277cc", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#c2255c", "#5f3dc4")
VERDICT_COLOURS = {"accept": "#2b8a3e", "retain": "#e0a100", "discard": "#868e96"}
FRACTIONS = {"train_success", "heldout_success", "frac_reward_zero_std", "completions/clipped_ratio",
             "tools/failure_frequency"}
COUNTS = {"dataset_size"}


def curves(metrics: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One line chart per curve: x = the rounds any run has it for, one series per run (None where absent)."""
    charts = []
    for key, title in CURVES.items():
        xs = _rounds_with(metrics, key)
        references = zero_shot_lines(metrics) if key == "heldout_success" else []
        if references:  # the baseline's round too, so a run evaluated only zero-shot still has a chart
            xs |= _rounds_with(metrics, "zero_shot_success")
        x = sorted(xs)
        series = [{"label": run, "values": [_number(rounds.get(r, {}).get(key)) for r in x]}
                  for run, rounds in metrics.items()]  # fmt: skip
        charts.append(chart(key, title, "lines", _y_of(key), x, series, references))
    return charts


def trl_curves(run: str, figures: dict[int, dict[str, float]]) -> list[dict[str, Any]]:
    """A run's TRL figures (`queries.trl_figures`), one line chart per name, titled with TRL's name; the
    importance-sampling weights' min, mean and max as three series of one chart."""
    rounds = sorted(figures)
    sampling = tuple(SAMPLING_NAMES.values())
    names = [n for n in dict.fromkeys(n for r in rounds for n in figures[r]) if n not in sampling]
    groups = [(name, name, [(run, name)]) for name in names]
    if any(n in figures[r] for r in rounds for n in sampling):
        title = "sampling/importance_sampling_ratio (min, mean, max)"
        groups.append(("sampling/importance_sampling_ratio", title, [(n.rsplit("/", 1)[1], n) for n in sampling]))
    charts = []
    for key, title, lines in groups:
        x = [r for r in rounds if any(n in figures[r] for _, n in lines)]
        series = [{"label": label, "values": [_number(figures[r].get(n)) for r in x]} for label, n in lines]
        charts.append(chart(key, title, "lines", _y_of(key), x, series, []))
    return charts


def _rounds_with(metrics: dict[str, dict[int, dict[str, Any]]], key: str) -> set[int]:
    return {r for rounds in metrics.values() for r, m in rounds.items() if m.get(key) is not None}


def zero_shot_lines(metrics: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per run with a baseline evaluation: its zero-shot held-out success, in the run's colour."""
    lines = []
    for index, (run, rounds) in enumerate(metrics.items()):
        found = [m["zero_shot_success"] for _, m in sorted(rounds.items()) if m.get("zero_shot_success") is not None]
        if found:
            name = "zero-shot" if len(metrics) == 1 else f"{run} zero-shot"
            lines.append({"label": f"{name} {float(found[0]):.0%}", "value": float(found[0]), "series": index})
    return lines


def count_bars(key: str, title: str, rows: list[dict[str, Any]], labels: tuple[str, ...],
               colours: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Bars of per-round counts: `rows` hold `round` and one column per label (missing: 0); `colours`: a
    label's own colour (others take the palette's)."""
    series = [{"label": label, "values": [int(r.get(label) or 0) for r in rows],
               **({"colour": colours[label]} if colours and label in colours else {})} for label in labels]  # fmt: skip
    return chart(key, title, "bars", "count", [int(r["round"]) for r in rows], series, [])


def chart(key: str, title: str, kind: str, y: str, x: list[int], series: list[dict], references: list[dict]) -> dict:
    """The spec; every series without a colour gets the palette's by its place."""
    series = [{**s, "colour": s.get("colour") or PALETTE[i % len(PALETTE)]} for i, s in enumerate(series)]
    return {"key": key, "title": title, "kind": kind, "y": y, "x": x, "series": series, "references": references}


def _y_of(key: str) -> str:
    return "fraction" if key in FRACTIONS else "count" if key in COUNTS else "value"


def _number(value: Any) -> float | None:
    return None if value is None else float(value)
