"""`coevolve show task|trajectory ID`: one task or one episode as a readable conversation (rich).

Reads only through the DuckDB views (`storage.catalog.connect`). An id may be any unique prefix.

    coevolve show task 3f2a            # turns, solution, checker, source, lineage, success per round
    coevolve show trajectory 9c1       # messages by role, the steps table, reward and finish, its task
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from coevolve.flows.render import literal

ROLE_STYLE = {"system": "dim", "user": "bold cyan", "assistant": "bold green", "tool": "yellow"}


class IdLookupError(LookupError):
    """No row, or several, match an id prefix; the message says what to type instead."""

    def __init__(self, message: str, *, found: int = 0) -> None:
        super().__init__(message)
        self.found = found  # how many ids matched (0: none, or no such view yet)


def find_id(con: Any, view: str, column: str, prefix: str, run: str | None) -> tuple[str, list[str]]:
    """The full id matching `prefix` in `view` and the runs that hold it."""
    if view not in {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}:
        raise IdLookupError(f"no {view} under this storage root yet; run `coevolve run CONFIG` first")
    where, params = f"starts_with({column}, ?)", [prefix]
    if run:
        where, params = where + " AND run = ?", [prefix, run]
    rows = con.execute(f"SELECT {column}, list(DISTINCT run ORDER BY run) FROM {view} WHERE {where} "
                       f"GROUP BY {column} ORDER BY {column} LIMIT 6", params).fetchall()
    what = view.removesuffix("s").replace("trajectorie", "trajectory")
    scope = f" in run '{run}'" if run else ""
    if not rows:
        raise IdLookupError(f"no {what} id starts with {prefix!r}{scope}; find ids with "
                           f"`coevolve sql \"SELECT {column} FROM {view} LIMIT 10\"`")
    if len(rows) > 1:
        shown = ", ".join(r[0][: len(prefix) + 6] for r in rows[:5])
        raise IdLookupError(f"{prefix!r} matches several {view}{scope} ({shown}, ...): type more of the id",
                            found=len(rows))
    return rows[0][0], rows[0][1]


def _pick_run(runs: list[str], run: str | None, console: Console) -> str:
    if run is None and len(runs) > 1:
        console.print(f"in runs {', '.join(runs)}; showing '{runs[-1]}' (choose with --run)", markup=False, style="dim")
    return run or runs[-1]


def _rows(con: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _calls(calls: list[dict]) -> str:
    return "; ".join(f"{c['name']}({json.dumps(c.get('arguments', {}), ensure_ascii=False)})" for c in calls)


def _json_block(value: str | None, limit: int = 800) -> str:
    """Compact JSON, cut at `limit` characters (the full value is one `coevolve sql` away)."""
    if not value:
        return "-"
    text = json.dumps(json.loads(value), ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " ..."


def _lineage(value: str) -> Table:
    lineage = json.loads(value) if value else {}
    if not lineage:
        return _kv_table([("lineage", "none (a seed or benchmark task)")])
    pairs = [(k, v) for k, v in lineage.items()]
    if lineage.get("trajectory_id"):
        pairs.append(("signal trajectory", f"coevolve show trajectory {lineage['trajectory_id'][:12]}"))
    return _kv_table(pairs)


def _kv_table(pairs: list[tuple[str, Any]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in pairs:
        table.add_row(key, value if isinstance(value, Text) else literal(value))
    return table


def task_view(con: Any, prefix: str, run: str | None = None) -> list[Any]:
    """Renderables for one task: header, turns with their solution calls, checker, lineage, success.

    A task outside every dataset (a held-out or exploration task) is found through its trajectories."""
    console = Console(stderr=True)
    try:
        task_id, runs = find_id(con, "tasks", "task_id", prefix, run)
    except IdLookupError as missing:
        if missing.found:
            raise
        try:
            task_id, runs = find_id(con, "trajectories", "task_id", prefix, run)
        except IdLookupError:
            raise missing from None
        run = _pick_run(runs, run, console)
        note = Text(f"{task_id} is in no dataset of run '{run}' (a held-out or exploration task): its episodes")
        return [Panel(note, title="task", title_align="left"), _success_panel(con, task_id, run)]
    run = _pick_run(runs, run, console)
    task = _rows(con, "SELECT * FROM tasks WHERE task_id = ? AND run = ? ORDER BY round LIMIT 1", [task_id, run])[0]
    turns = json.loads(task["turns"])
    solution = json.loads(task["solution"]) if task["solution"] else None
    conversation = []
    for i, turn in enumerate(turns):
        conversation.append(Text.assemble((f"user [{i}] ", ROLE_STYLE["user"]), literal(turn)))
        if solution and i < len(solution):
            conversation.append(Text.assemble(("  solution ", "green"), literal(_calls(solution[i]) or "(no calls)")))
    header = _kv_table([
        ("task", task_id), ("run", run), ("env / split / family", f"{task['env']} / {task['split']} / {task['family']}"),
        ("source", task["source"]), ("added in round", task["round"]),
    ])
    return [
        Panel(header, title="task", title_align="left"),
        Panel(Group(*conversation), title="turns and reference solution", title_align="left"),
        Panel(literal(_json_block(task["checker"])), title="checker", title_align="left"),
        Panel(_lineage(task["lineage"]), title="lineage", title_align="left"),
        _success_panel(con, task_id, run),
    ]


def _success_panel(con: Any, task_id: str, run: str) -> Panel:
    success = Table("round", "stage", "source", "episodes", "successes", "mean reward", header_style="bold")
    for row in _rows(con, "SELECT round, stage, source, count(*) AS n, sum(success::INT) AS ok, "
                          "avg(reward) AS reward FROM trajectories WHERE task_id = ? AND run = ? "
                          "GROUP BY ALL ORDER BY ALL", [task_id, run]):
        success.add_row(str(row["round"]), literal(row["stage"]), literal(row["source"]), str(row["n"]),
                        str(row["ok"]), f"{row['reward']:.3f}")
    return Panel(success, title="its trajectories: success per round", title_align="left")


def _message(message: dict[str, Any]) -> Text:
    role = message.get("role", "?")
    text = Text(f"{role}: ", style=ROLE_STYLE.get(role, "bold"))
    content = message.get("content")
    text.append_text(literal(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)))
    if message.get("tool_calls"):
        text.append_text(literal(f"\n  tool calls: {json.dumps(message['tool_calls'], ensure_ascii=False)}", "green"))
    return text


def trajectory_view(con: Any, prefix: str, run: str | None = None) -> list[Any]:
    """Renderables for one episode: outcome, messages by role, steps, and the task it belongs to."""
    console = Console(stderr=True)
    traj_id, runs = find_id(con, "trajectories", "trajectory_id", prefix, run)
    run = _pick_run(runs, run, console)
    t = _rows(con, "SELECT * FROM trajectories WHERE trajectory_id = ? AND run = ?", [traj_id, run])[0]
    outcome = Text(f"reward {t['reward']:.3f}  ", style="bold")
    outcome.append("success" if t["success"] else "failure", style="green" if t["success"] else "red")
    outcome.append_text(literal(f"  finish {t['finish']}" + (f" ({t['error']})" if t["error"] else "")))
    header = _kv_table([
        ("trajectory", traj_id), ("run / round / stage", f"{run} / {t['round']} / {t['stage']}"),
        ("source", t["source"]), ("task", t["task_id"]), ("sample / policy", f"{t['sample']} / {t['policy_version']}"),
        ("outcome", outcome),
        ("size", f"{t['num_turns']} turns, {t['num_steps']} replies, {t['num_tool_calls']} tool calls "
                 f"({t['num_tool_errors']} failed), {t['prompt_tokens']}+{t['completion_tokens']} tokens"),
    ])
    messages = [_message(m) for m in json.loads(t["messages"])]
    steps = Table(header_style="bold", pad_edge=False, expand=True)
    for name, width in (("step", 4), ("turn", 4), ("#", 2), ("kind", 6), ("tool", 8), ("ok", 3)):
        steps.add_column(name, min_width=width, no_wrap=True, overflow="ellipsis", max_width=width + 12)
    for name in ("arguments", "observation"):
        steps.add_column(name, no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
    for s in _rows(con, "SELECT * FROM steps WHERE trajectory_id = ? AND run = ? ORDER BY step, call_index",
                   [traj_id, run]):
        steps.add_row(str(s["step"]), str(s["turn"]), str(s["call_index"]), literal(s["kind"]), literal(s["tool"] or ""),
                      Text("yes") if s["ok"] else Text("no", style="red"), literal(s["arguments"] or ""),
                      literal(s["observation"]))
    task = _task_line(con, t["task_id"], run)
    return [
        Panel(header, title="trajectory", title_align="left"),
        Panel(Group(*messages), title="messages", title_align="left"),
        Panel(steps, title="steps", title_align="left"),
        Panel(task, title="task", title_align="left"),
        Panel(literal(_json_block(t["eval_details"])), title="evaluation details", title_align="left"),
    ]


def _task_line(con: Any, task_id: str, run: str) -> Text:
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    rows = _rows(con, "SELECT source, family, turns FROM tasks WHERE task_id = ? AND run = ? LIMIT 1",
                 [task_id, run]) if "tasks" in views else []
    if not rows:
        return literal(f"{task_id} (not in the run's dataset: a held-out or exploration task)")
    first = json.loads(rows[0]["turns"])[0] if json.loads(rows[0]["turns"]) else ""
    return literal(f"{task_id} ({rows[0]['source']}, {rows[0]['family']}): {first}\n"
                f"coevolve show task {task_id[:12]}")


def show(kind: str, prefix: str, root: Path, run: str | None = None, *, console: Console | None = None) -> None:
    from coevolve.storage.catalog import connect

    con = connect(root)
    try:
        view = task_view if kind == "task" else trajectory_view
        for renderable in view(con, prefix, run):
            (console or Console()).print(renderable)
    finally:
        con.close()
