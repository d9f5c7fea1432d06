"""Human-readable output for the CLI: query results as a table / CSV / JSON, rows as a table, and the
messages that explain a failed query.

Stored text (model replies, teacher output, tool results) is shown literally: never read as Rich markup
(`[/x]` would vanish or crash the command), with control characters made visible (`literal`; in CSV
too, JSON escapes them itself), so a reply prints as it was written.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pacsv

if TYPE_CHECKING:
    from rich.text import Text


def print_table(table: pa.Table, fmt: str = "table", *, max_rows: int = 200, max_width: int = 60) -> None:
    if fmt == "csv":
        pacsv.write_csv(_visible(table), sys.stdout.buffer)
        return
    if fmt == "json":
        for row in table.to_pylist():
            print(json.dumps(row, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    view = Table(show_edge=False, header_style="bold")
    for name in table.column_names:
        view.add_column(literal(name), overflow="ellipsis", max_width=max_width)
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*(literal(_cell(v)) for v in row.values()))
    console = Console()
    console.print(view)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows (--max-rows {table.num_rows} shows them; "
                      f"--format csv prints all)", markup=False)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def literal(value: object, style: str = "") -> Text:
    """`value` as Rich text shown exactly as stored: no markup, control characters (ANSI escapes...) as
    visible `\\xNN`."""
    from rich.text import Text

    return Text(_CONTROL.sub(_hex, str(value)), style=style)


def _visible(table: pa.Table) -> pa.Table:
    """`table` with the control characters of its text columns as visible `\\xNN`, as `literal` shows them
    (newlines and tabs kept: CSV quotes them), so CSV on a terminal never carries an ANSI escape."""
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            continue
        column = table.column(i)
        if pc.any(pc.match_substring_regex(column, _CONTROL.pattern)).as_py():
            values = [None if v is None else _CONTROL.sub(_hex, v) for v in column.to_pylist()]
            table = table.set_column(i, field, pa.array(values, field.type))
    return table.rename_columns([_CONTROL.sub(_hex, name) for name in table.column_names])


def _hex(match: re.Match) -> str:
    return f"\\x{ord(match.group()):02x}"


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_rows(rows: list[dict]) -> None:
    """Rows of plain values (e.g. `summary.runs_overview`) as a table whose cells wrap instead of being cut,
    so a long run name stays whole at 80 columns."""
    from rich.console import Console
    from rich.table import Table

    view = Table(show_edge=False, header_style="bold")
    for name in rows[0]:
        view.add_column(literal(name), overflow="fold")
    for row in rows:
        view.add_row(*(literal(_cell(v)) for v in row.values()))
    Console().print(view)


_ARTIFACT_PATH = re.compile(r"run=([^/'\"]+)/round=(\d+)/stage=(\w+)/(\w+)\.parquet")


_MISSING_TABLE = re.compile(r"Table with name (\w+) does not exist")


def _rebuild(path: Path | str) -> str:
    found = _ARTIFACT_PATH.search(str(path))
    if not found:
        return ""
    run, round_, stage, _ = found.groups()
    return f"coevolve stage {stage} --run {run} --round {round_} --force"


def unreadable_notes(paths: list[Path]) -> list[str]:
    """One line per corrupt artifact file the views leave out, with the command that rebuilds it."""
    return [
        f"warning: left out of the views: {path} is not readable Parquet"
        + (f"; rebuild it with `{_rebuild(path)}`" if _rebuild(path) else "")
        for path in paths
    ]


def explain_query_error(exc: Exception, root: Path) -> str:
    """One paragraph for a failed query: a corrupt artifact names the command that rebuilds it."""
    text = str(exc).strip()
    found = _ARTIFACT_PATH.search(text)
    if found and "*" not in found.group(0):
        run, round_, stage, artifact = found.groups()
        return (f"cannot read {root}/{found.group(0)} ({text.splitlines()[0]}): the file is corrupt or "
                f"half-written. Rebuild it with `coevolve stage {stage} --run {run} --round {round_} --force`, "
                f"then `coevolve run --run {run}` recomputes what depends on it.")
    if "does not exist" in text and ("Table" in text or "Catalog" in text):
        from coevolve.storage.catalog import ArtifactFiles

        files, missing = ArtifactFiles.scan(root), _MISSING_TABLE.search(text)
        broken = [p for p in files.unreadable if missing and p.name == f"{missing.group(1)}.parquet"]
        if broken:  # every file of that view is corrupt, so there is no view
            commands = "; ".join(f"`{_rebuild(p)}`" for p in broken if _rebuild(p))
            return (f"no readable {missing.group(1)} files under {root}: {len(broken)} corrupt or half-written "
                    f"({broken[0]}). Rebuild with {commands}.")
        views = ", ".join(files.readable) or "none yet (run `coevolve run CONFIG` first)"
        return f"{text.splitlines()[0]}. Views under {root}: {views}; columns are listed in docs/sql.md."
    return text
