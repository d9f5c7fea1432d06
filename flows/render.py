"""Human-readable output for the CLI: query results as a table / lines / CSV / JSON, rows as a table, and the
messages that explain a failed query.

`coevolve sql` prints a table when it fits the terminal and otherwise each row as lines, one `column | value`
per line (`--format line`, psql's expanded display): at 80 columns a nine-column lineage row stays readable
instead of nine headers cut to "…". CSV quotes a value only where CSV needs it (a comma, a quote, a
newline).

Stored text (model replies, teacher output, tool results) is shown literally: never read as Rich markup
(`[/x]` would vanish or crash the command), with control characters made visible (`literal`; in CSV
too, JSON escapes them itself), so a reply prints as it was written. The escape reads one way only: a
control character is `\\xNN`, and a run of backslashes standing before a control character or before the
text `xNN` is doubled. So in the output an odd run of backslashes before `xNN` is an escaped character
(`\\x1b` is ESC, `\\\\\\x1b` a backslash then ESC) and an even run is that many halved backslashes and
the text (`\\\\x1b` is the four characters `\\x1b` as stored); every other backslash (`\\n` in JSON) is
left as it is.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from rich.text import Text


FORMATS = ("auto", "table", "line", "csv", "json")
"""`coevolve sql --format`: auto is a table when it fits the terminal, else lines."""


def print_table(table: pa.Table, fmt: str = "table", *, max_rows: int = 200, max_width: int = 60) -> None:
    """`table` in `fmt` (`FORMATS`); table and line show at most `max_rows` rows and cut a value past
    `max_width` characters, csv and json print everything."""
    if fmt == "csv":
        return write_csv(table)
    if fmt == "json":
        for row in table.to_pylist():
            print(json.dumps(row, default=str))
        return
    from rich.console import Console

    console = Console()
    if fmt == "line" or (fmt == "auto" and table_width(table, max_rows, max_width) > console.width):
        for line in row_lines(table.slice(0, max_rows), console.width, max_width):
            print(line)
    else:
        _print_rich_table(console, table, max_rows, max_width)
    if table.num_rows > max_rows:
        console.print(f"... {table.num_rows - max_rows} more rows (--max-rows {table.num_rows} shows them; "
                      f"--format csv prints all)", markup=False)


def _print_rich_table(console, table: pa.Table, max_rows: int, max_width: int) -> None:
    from rich.table import Table

    view = Table(show_edge=False, header_style="bold")
    for name in table.column_names:
        view.add_column(literal(name), overflow="ellipsis", max_width=max_width)
    for row in table.slice(0, max_rows).to_pylist():
        view.add_row(*(literal(_cell(v)) for v in row.values()))
    console.print(view)


def table_width(table: pa.Table, max_rows: int, max_width: int) -> int:
    """The columns a table of `table`'s first `max_rows` rows takes uncut: each column as wide as its widest
    line (at most `max_width`), 3 between columns."""
    widths = []
    for name, values in zip(table.column_names, table.slice(0, max_rows).to_pydict().values(), strict=True):
        lines = [line for v in [name, *map(_cell, values)] for line in escape_controls(v).splitlines() or [""]]
        widths.append(min(max(map(len, lines)), max_width))
    return sum(widths) + 3 * max(len(widths) - 1, 0)


def row_lines(table: pa.Table, width: int, max_width: int) -> list[str]:
    """Each row as a `-[ row N ]-` rule, then `column | value` per column, the value cut past `max_width`
    characters (`…`) and wrapped to `width` under itself."""
    names = [escape_controls(n) for n in table.column_names]
    pad = max(map(len, names), default=0)
    room = max(width - pad - 3, 16)
    out = []
    for number, row in enumerate(table.to_pylist(), 1):
        rule = f"-[ row {number} ]"
        out.append(rule + "-" * max(min(width, pad + 3 + room) - len(rule), 0))
        for name, value in zip(names, row.values(), strict=True):
            text = escape_controls(_cell(value))
            if len(text) > max_width:
                text = text[: max_width - 1] + "…"
            chunks = [line[i : i + room] for line in text.split("\n") for i in range(0, max(len(line), 1), room)]
            out += [f"{name if i == 0 else '':<{pad}} | {chunk}".rstrip() for i, chunk in enumerate(chunks)]
    return out


def write_csv(table: pa.Table) -> None:
    """`table` as CSV, a value quoted only where CSV needs it, control characters visible (`_visible`)."""
    writer = csv.writer(sys.stdout, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    visible = _visible(table)
    writer.writerow(visible.column_names)
    for row in visible.to_pylist():
        writer.writerow([_csv_value(v) for v in row.values()])
    sys.stdout.flush()


def _csv_value(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return value


_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"
_ESCAPED = re.compile(rf"(\\*)({_CONTROL}|x[0-9a-fA-F]{{2}})")
"""A control character, or the text `xNN`, with the backslashes before it (see the module docstring)."""
_NEEDS_ESCAPE = rf"{_CONTROL}|\\x[0-9a-fA-F]{{2}}"


def escape_controls(text: str) -> str:
    """`text` with its control characters as `\\xNN`, unambiguously (the module docstring's rule)."""
    return _ESCAPED.sub(_escape, text)


def _escape(match: re.Match) -> str:
    backslashes, tail = match.groups()
    return backslashes * 2 + (f"\\x{ord(tail):02x}" if len(tail) == 1 else tail)


def literal(value: object, style: str = "") -> Text:
    """`value` as Rich text shown exactly as stored: no markup, control characters (ANSI escapes...) as
    visible `\\xNN` (`escape_controls`)."""
    from rich.text import Text

    return Text(escape_controls(str(value)), style=style)


def _visible(table: pa.Table) -> pa.Table:
    """`table` with the control characters of its text columns as visible `\\xNN`, as `literal` shows them
    (newlines and tabs kept: CSV quotes them), so CSV on a terminal never carries an ANSI escape."""
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            continue
        column = table.column(i)
        if pc.any(pc.match_substring_regex(column, _NEEDS_ESCAPE)).as_py():
            values = [None if v is None else escape_controls(v) for v in column.to_pylist()]
            table = table.set_column(i, field, pa.array(values, field.type))
    return table.rename_columns([escape_controls(name) for name in table.column_names])


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_rows(rows: list[dict]) -> None:
    """Rows of plain values (e.g. `summary.runs_overview`) as a table whose cells wrap instead of being cut;
    the first column (a run's name) never wraps, so it stays whole and greppable at 80 columns."""
    from rich.console import Console
    from rich.table import Table

    view = Table(show_edge=False, header_style="bold")
    for i, name in enumerate(rows[0]):
        view.add_column(literal(name), overflow="fold", no_wrap=i == 0)
    for row in rows:
        view.add_row(*(literal(_cell(v)) for v in row.values()))
    Console().print(view)


_ARTIFACT_PATH = re.compile(r"run=([^/'\"]+)/round=(\d+)/stage=(\w+)/(\w+)\.parquet")
_QUOTED_ARTIFACT = re.compile(r"[\"']([^\"'\n]*run=[^/'\"]+/round=\d+/stage=\w+/\w+\.parquet)[\"']")
"""An artifact file named in an error message, as DuckDB quotes it (absolute, or relative to the cwd)."""
_MISSING_TABLE = re.compile(r"Table with name (\w+) does not exist")


def _rebuild(path: Path | str) -> str:
    """The command that rebuilds the artifact file `path` (under its storage root), or "" for another path."""
    found = _ARTIFACT_PATH.search(str(path))
    if not found:
        return ""
    run, round_, stage, _ = found.groups()
    return f"coevolve stage {stage} --run {run} --round {round_} --force{_root_option_of(path)}"


def _root_option_of(path: Path | str) -> str:
    """` --root ROOT` for the storage root holding the artifact file `path`, or "" for the default root."""
    from coevolve.storage.layout import root_option

    found = _ARTIFACT_PATH.search(str(path))
    return root_option(Path(str(path)[: found.start()] or "."))


def unreadable_notes(paths: list[Path]) -> list[str]:
    """One line per artifact file the views leave out, with why (`catalog.unreadable_reason`) and, for a
    corrupt one, the command that rebuilds it."""
    from coevolve.storage.catalog import unreadable_reason

    notes = []
    for path in paths:
        reason = unreadable_reason(path) or "is not readable Parquet"
        fix = f"; rebuild it with `{_rebuild(path)}`" if _rebuild(path) and "Parquet" in reason else ""
        notes.append(f"warning: left out of the views: {path} {reason}{fix}")
    return notes


def changed_files_message(paths: list[Path]) -> str:
    """One paragraph for artifact files that no longer hold what their stage wrote: nothing was queried."""
    first, others = paths[0], len(paths) - 1
    also = f" (and {others} other file{'s' if others > 1 else ''}: {', '.join(map(str, paths[1:4]))})" if others else ""
    fix = f" Rebuild it with `{_rebuild(first)}`." if _rebuild(first) else ""
    return (f"{first} does not match its manifest: its sha256 is not the one its stage recorded (changed on "
            f"disk since it was written){also}; nothing was queried.{fix}")


def explain_query_error(exc: Exception, root: Path) -> str:
    """One paragraph for a failed query, naming its real cause: a file refused by the read-only rules, a
    file the OS will not open, or a corrupt artifact (with the command that rebuilds it)."""
    import duckdb

    text = str(exc).strip()
    if isinstance(exc, duckdb.PermissionException) and not text.startswith("read-only"):
        return (f"refused: {text.splitlines()[0]}. `coevolve sql` reads only the files of the runs under "
                f"{root}; to query another storage root, pass it as --root.")
    quoted = _QUOTED_ARTIFACT.search(text)
    if quoted and "*" not in quoted.group(1):
        return _explain_file_error(Path(quoted.group(1)), text.splitlines()[0]) or text
    if "does not exist" in text and ("Table" in text or "Catalog" in text):
        from coevolve.storage.catalog import ArtifactFiles

        files, missing = ArtifactFiles.scan(root), _MISSING_TABLE.search(text)
        broken = [p for p in files.unreadable if missing and p.name == f"{missing.group(1)}.parquet"]
        if broken:  # every file of that view is left out, so there is no view
            notes = "; ".join(note.removeprefix("warning: left out of the views: ") for note in unreadable_notes(broken))
            return f"no readable {missing.group(1)} files under {root}: {notes}."
        views = ", ".join(files.readable) or "none yet (run `coevolve run CONFIG` first)"
        return f"{text.splitlines()[0]}. Views under {root}: {views}; columns are listed in docs/sql.md."
    return text


def _explain_file_error(path: Path, error: str) -> str | None:
    """Why the artifact file `path` could not be read, from the file itself; None when it reads (the error
    had another cause)."""
    from coevolve.storage.catalog import unreadable_reason

    reason = unreadable_reason(path)
    if reason is None:
        return None
    if "Parquet" not in reason:  # the OS refused it, or it is gone
        return f"cannot read {path}: it {reason} ({error})."
    found = _ARTIFACT_PATH.search(str(path))
    run = found.group(1)
    return (f"cannot read {path} ({error}): the file is corrupt or half-written. Rebuild it with "
            f"`{_rebuild(path)}`, then `coevolve run --run {run}{_root_option_of(path)}` recomputes what "
            f"depends on it.")

