"""The `coevolve` commands that look at runs: `sql`, `runs`, `evolution`, `show`, `ui` (registered by
`coevolve.cli`). They read the runs folder only."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated

import typer

from coevolve.cli.support import RootOption, fail, root_of, run_layout, user_errors


def sql(
    query: Annotated[str, typer.Argument(help="SQL over the views trajectories, steps, samples, updates, ...")],
    format_: Annotated[str, typer.Option("--format", help=(
        "auto (a table when it fits the terminal, else line), table, line (each row as `column | value` "
        "lines), csv or json."))] = "auto",
    max_rows: Annotated[int, typer.Option(help="Rows a table shows at most (csv and json print all).")] = 200,
    max_width: Annotated[int, typer.Option(
        help="Characters a value shows at most in a table or a line (longer ones end in …).")] = 60,
    root: RootOption = None,
) -> None:
    """Query every run with DuckDB, read-only (views over the Parquet artifacts, with run/round/stage
    columns; SELECT statements only, files under the root only; see docs/sql.md). The files of the views
    it reads are checked against their manifests' sha256 first: a changed one is refused, naming it.
    A row wider than the terminal prints as lines, one `column | value` each (`--format line`)."""
    import duckdb

    from coevolve.flows.render import FORMATS
    from coevolve.storage.catalog import ArtifactFiles, repair_catalog, views_read
    from coevolve.storage.catalog import query as run_query

    if format_ not in FORMATS:
        fail(f"--format must be {', '.join(FORMATS[:-1])} or {FORMATS[-1]}, got {format_!r}")
    if max_rows < 1:
        fail(f"--max-rows must be >= 1, got {max_rows}")
    if max_width < 4:
        fail(f"--max-width must be >= 4, got {max_width}")
    warning = repair_catalog(root_of(root))  # the persisted catalog other clients open
    if warning:
        typer.echo(warning, err=True)
    files = ArtifactFiles.scan(root_of(root))
    try:
        changed = files.changed(views_read(query, files.readable))
    except user_errors() as exc:  # a manifest of the wrong shape
        fail(str(exc))
    if changed:
        from coevolve.flows.render import changed_files_message

        fail(changed_files_message(changed))
    try:
        table = run_query(root_of(root), query, files)
    except duckdb.Error as exc:
        from coevolve.flows.render import explain_query_error

        fail(explain_query_error(exc, root_of(root)))
    from coevolve.flows.render import print_table, unreadable_notes

    for note in unreadable_notes(files.unreadable):
        typer.echo(note, err=True)
    print_table(table, format_, max_rows=max_rows, max_width=max_width)


def runs(root: RootOption = None) -> None:
    """List runs with their rounds, dataset size, success rates, stale stages (from their manifests; a
    stage re-run leaves the stages that read it stale until the next `coevolve run`) and size on disk; a run
    whose files cannot be read is named in a line of its own (exit status 2) and the others are listed."""
    from coevolve.flows.render import print_rows
    from coevolve.flows.runs import runs_disk, stale_note
    from coevolve.flows.summary import runs_overview
    from coevolve.storage.staleness import stale_stages

    unreadable: list[str] = []
    rows = runs_overview(root_of(root), unreadable=unreadable)
    for line in unreadable:
        typer.secho(f"error: {line}", fg="red", err=True)
    stale = {row["run"]: stale_stages(run_layout(root, row["run"]).run_dir) for row in rows}
    sizes, disk_lines = runs_disk(root_of(root), [row["run"] for row in rows])
    rows = [{**row, "stale": len(stale[row["run"]]), "disk": sizes[row["run"]]} for row in rows]
    if rows:
        print_rows(rows)
        typer.echo("\n".join(disk_lines))
    elif not unreadable:
        typer.echo(f"no runs under {root_of(root)} yet; start one with `coevolve run configs/test-tiny.yaml`")
    for run, found in stale.items():
        if note := stale_note(run_layout(root, run), found):
            typer.echo(note)
    if unreadable:
        raise typer.Exit(2)


def compare(
    left: Annotated[str, typer.Argument(metavar="RUN", help="A run under --root.")],
    right: Annotated[str, typer.Argument(metavar="OTHER", help="The run to compare it with (under --other-root).")],
    other_root: Annotated[Path | None, typer.Option(
        help="Storage root of OTHER (default: --root).")] = None,  # fmt: skip
    root: RootOption = None,
) -> None:
    """Whether two runs computed the same thing: every artifact and checkpoint file hash of every stage,
    from the manifests, after checking that each file still holds what its manifest records (sha256).
    Exit status 1 when any differs or a file does not match its manifest (a change meant to keep
    behaviour must pass it)."""
    from coevolve.flows.compare import changed_files, compare_runs

    ours, theirs = run_layout(root, left), run_layout(other_root or root, right)
    for layout in (ours, theirs):
        if not layout.run_dir.exists():
            fail(f"no run '{layout.run}' under {layout.root}; list runs with `coevolve runs`")
    try:
        changed = changed_files(ours) + changed_files(theirs)
        compared, differences = compare_runs(ours, theirs)
    except user_errors() as exc:  # a manifest of the wrong shape
        fail(str(exc))
    for path in changed:
        typer.echo(f"{path} does not match its manifest (its sha256 is not the one recorded, or it is gone)")
    for d in differences:
        typer.echo(f"round {d.round} {d.stage}: {d.what}: {d.left} != {d.right}")
    outputs = [d for d in differences if d.what != "key"]
    keys = len(differences) - len(outputs)
    unmatched = {0: "", 1: "; 1 file does not match its manifest"}.get(
        len(changed), f"; {len(changed)} files do not match their manifests")
    typer.echo(f"{compared} outputs compared: {len(outputs)} differ; {keys} cache keys differ{unmatched}")
    if outputs or changed:
        raise typer.Exit(1)


def evolution(
    run_name: Annotated[str, typer.Option("--run", help="The run to report on.")],
    root: RootOption = None,
) -> None:
    """What a run's data evolution did: signals, explorations, candidates, verdicts, merged tasks, how the
    policy did on them, one admitted task and the SQL that follows it back to its signal."""
    from coevolve.flows.evolution_report import evolution_report

    layout = run_layout(root, run_name)
    if not layout.run_dir.exists():
        fail(f"no run '{run_name}' under {layout.root}; list runs with `coevolve runs`")
    for line in evolution_report(layout.root, run_name):
        typer.echo(line)


def show(
    kind: Annotated[str, typer.Argument(help="task or trajectory.")],
    id_: Annotated[str, typer.Argument(metavar="ID", help="Its id, or any unique prefix of it.")],
    run_name: Annotated[str | None, typer.Option("--run", help="Run to look in (default: any).")] = None,
    root: RootOption = None,
) -> None:
    """Show one task (turns, solution, checker, lineage, success per round) or one trajectory
    (messages, tool calls and observations, reward, its task) as a readable conversation."""
    import duckdb

    from coevolve.flows.show import IdLookupError
    from coevolve.flows.show import show as show_item

    if kind not in {"task", "trajectory"}:
        fail(f"cannot show {kind!r}: use `coevolve show task ID` or `coevolve show trajectory ID`")
    try:
        show_item(kind, id_, root_of(root), run_name)
    except IdLookupError as exc:
        fail(str(exc))
    except duckdb.Error as exc:
        from coevolve.flows.render import explain_query_error

        fail(explain_query_error(exc, root_of(root)))


def ui(
    root: RootOption = None,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8420,
    host: Annotated[str, typer.Option(help="Address to bind; anyone who reaches it can read the runs.")] = "127.0.0.1",
) -> None:
    """A read-only local web view of the runs: curves, rounds, trajectories and their tokens, signals,
    verification outcomes and each synthesized task's lineage (coevolve.ui)."""
    if not root_of(root).is_dir():
        fail(f"no storage root {root_of(root)}; start a run with `coevolve run configs/test-tiny.yaml` or pass --root")
    refused = _cannot_listen(host, port)
    if refused:
        fail(f"cannot serve on {host}:{port}: {refused}; pass another --port (or stop what holds it)")
    from coevolve.ui.app import serve

    serve(root_of(root), host=host, port=port)


def _cannot_listen(host: str, port: int) -> str | None:
    """Why nothing can listen on `host:port` (taken, not an address of this machine), or None."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(infos[0][4])
    except OSError as exc:
        return "the port is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return None
