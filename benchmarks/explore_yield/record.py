"""The explore-yield benchmark's record: the exploration rows as Parquet, a markdown page, a result row.

`write_record` writes `<out>/explorations.parquet` (one row per exploration, `links.exploration_row`) and
`<out>/report.md` (each link's yield with its Wilson interval, per gap family, the threshold, and where it
fails, what the rows show), and appends the figures to `explore-yield.jsonl` (`benchmarks.record`). The
figures are computed from the Parquet rows as read back, so the record is what the rows say.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.explore_yield.links import THRESHOLD, figures, link_counts, threshold_met

NAME = "explore-yield"
CANDIDATE = pl.Struct({"candidate_id": pl.String, "status": pl.String, "query": pl.String,
                       "tools": pl.List(pl.String), "calls_gap_tool": pl.Boolean, "verdict": pl.String,
                       "reason": pl.String, "task_id": pl.String})  # fmt: skip
SCHEMA = pl.Schema({
    "teacher": pl.String, "variant": pl.String, "round": pl.Int64, "exploration_id": pl.String,
    "world_task_id": pl.String, "signal_kind": pl.String, "named_tool": pl.String, "gap_tool": pl.String,
    "gap_family": pl.String, "listing": pl.String, "status": pl.String, "reason": pl.String,
    "tools_in_context": pl.List(pl.String), "tools_called_ok": pl.List(pl.String), "called_gap_tool": pl.Boolean,
    "gap_tool_errors": pl.List(pl.String), "replies": pl.Int64, "first_replies": pl.List(pl.String), "parse_errors": pl.Int64,
    "candidates": pl.List(CANDIDATE), "admitted_task_ids": pl.List(pl.String),
})  # fmt: skip


def rows_frame(rows: Sequence[dict], *, teacher: str, variant: str) -> pl.DataFrame:
    return pl.DataFrame([{"teacher": teacher, "variant": variant, **row} for row in rows], schema=SCHEMA)


def read_rows(path: Path) -> list[dict]:
    """The exploration rows of a record's `explorations.parquet`."""
    return pl.read_parquet(path).to_dicts()


def failures(rows: Sequence[dict]) -> list[str]:
    """What the rows show about each link, for the page: reflections, calls, verdicts."""
    statuses = Counter(r["status"] for r in rows)
    in_context = sum(r["gap_tool"] in r["tools_in_context"] for r in rows)
    missed = [r for r in rows if not r["called_gap_tool"]]
    called_other = Counter(t for r in missed for t in r["tools_called_ok"])
    aimed = [c for r in rows for c in r["candidates"] if c["status"] == "ok" and c["calls_gap_tool"]]
    reasons = Counter((c["reason"] or "").split(":")[0].split(";")[0].strip() or "(none)" for c in aimed
                      if c["task_id"] is None)  # fmt: skip
    errors = Counter((e or "").split(";")[0][:80] for r in missed for e in r.get("gap_tool_errors") or [])
    tried = sum(bool(r.get("gap_tool_errors")) for r in missed)
    abstracted = Counter(c["status"] for r in rows if r["called_gap_tool"] for c in r["candidates"])
    return [
        f"- reflections: {dict(statuses)}; the gap tool was in the context of {in_context} of {len(rows)}",
        f"- explorations that never called their gap tool: {len(missed)}; what they called instead (top 6): "
        f"{dict(called_other.most_common(6))}",
        f"- of those, {tried} called it and failed; their errors (top 6): {dict(errors.most_common(6))}; replies "
        f"{sum(r.get('replies') or 0 for r in missed)}, malformed calls {sum(r.get('parse_errors') or 0 for r in missed)}",
        f"- candidates of the explorations that did call it, by status: {dict(abstracted)}",
        f"- candidates calling the gap tool that verification discarded, by reason: {dict(reasons.most_common(8))}",
    ]


def render(rows: Sequence[dict], families: Sequence[str], *, teacher: str, variant: str, command: str) -> str:
    counts = link_counts(rows, families)
    met, failed = threshold_met(counts)
    table = [f"| {name} | {f['value']:g}{' ' + f['unit'] if f['unit'] else ''} | "
             f"{'-' if 'interval' not in f else '[{:.3g}, {:.3g}]'.format(*f['interval'])} |"
             for name, f in figures(counts).items()]  # fmt: skip
    per_family = []
    for family in families:
        mine = [r for r in rows if r["gap_family"] == family]
        aimed = [c for r in mine for c in r["candidates"] if c["status"] == "ok" and c["calls_gap_tool"]]
        tool = mine[0]["gap_tool"] if mine else "-"
        per_family.append(f"| {family} | {tool} | {len(mine)} | {sum(r['called_gap_tool'] for r in mine)} | "
                          f"{len(aimed)} | {sum(c['task_id'] is not None for c in aimed)} | "
                          f"{counts['admitted_per_family'][family]} |")  # fmt: skip
    return "\n".join([
        f"# explore-yield: teacher `{teacher}`, variant `{variant}`", "",
        f"    {command}", "",
        f"Threshold, written down before the run: {THRESHOLD}.", "",
        f"A round explores each gap tool on validation worlds ({len(rows)} explorations over "
        f"{len(counts['rounds'])} round(s)); a candidate passes when its verdict is one `merge.admit` keeps.", "",
        f"**Threshold {'met' if met else 'not met'}.**", *[f"- {line}" for line in failed], "",
        "| figure | value | 95 % Wilson interval |", "|---|---|---|", *table, "",
        "| gap family | tool | explorations | called it | candidates calling it | admitted of those | "
        "admitted tasks by round |", "|---|---|---|---|---|---|---|", *per_family, "",
        "What the rows show:", *failures(rows), "",
        "Rows: `explorations.parquet` (one per exploration; its candidates with verdicts and reasons).", "",
    ])  # fmt: skip


def write_record(rows: Sequence[dict], families: Sequence[str], *, teacher: str, variant: str, command: str,
                 out: Path, note: str = "", commit: str | None = None) -> dict:  # fmt: skip
    """Write the rows and the page into `out`, append the result row (computed from the rows read back)
    and return it."""
    from coevolve.benchmarks.record import REPO, record_result

    out.mkdir(parents=True, exist_ok=True)
    rows_frame(rows, teacher=teacher, variant=variant).write_parquet(out / "explorations.parquet")
    stored = read_rows(out / "explorations.parquet")
    (out / "report.md").write_text(
        render(stored, families, teacher=teacher, variant=variant, command=command)
    )
    where = out.resolve()
    outputs = str(where.relative_to(REPO)) if where.is_relative_to(REPO) else str(out)
    return record_result(NAME, figures(link_counts(stored, families)), command=command,
                         variant=f"{teacher}, {variant}", note=note, outputs=outputs, commit=commit)  # fmt: skip
