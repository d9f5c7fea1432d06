"""An OpenEnv environment's tasks: its reset arguments and the user's words, from a JSONL or Parquet file.

One row per task (`env.options.tasks`):

    {"prompt": "Bring bolts to 5.", "reset": {"stock": {"bolt": 2}, "goal": {"bolt": 5}}, "split": "train"}

- `prompt` (or `turns`, a list of user messages): what the user says;
- `reset` (optional, an object): the keyword arguments of the environment's `reset` for this task;
- `split` (optional, default `train`), `family` (optional, default `openenv`);
- `solution` (optional): reference calls, a list of `{"name": ..., "arguments": {...}}` (one-turn tasks).

In Parquet, `reset` and `solution` may be JSON text or nested columns. A bad row is one `ValueError` line
naming the file and the row (1-based).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coevolve.core import ToolCall
from coevolve.envs.base import Task

ENV_NAME = "openenv"
DEFAULT_SPLIT = "train"
DEFAULT_FAMILY = "openenv"
MAX_TASKS = 100_000
"""Most rows a task file may hold (a dry run reads every split it checks)."""
FIELDS = {"prompt", "turns", "reset", "split", "family", "solution", "id"}


def read_task_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL or Parquet task file (ValueError naming the file or the row)."""
    if not path.is_file():
        raise ValueError(f"{path}: no such task file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:
            raise ValueError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    elif path.suffix in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} row {number}: not JSON ({exc.msg})") from None
    else:
        raise ValueError(f"{path}: a task file is .jsonl or .parquet (got {path.suffix or 'no suffix'!r})")
    if len(rows) > MAX_TASKS:
        raise ValueError(f"{path}: {len(rows)} rows, more than the {MAX_TASKS} a task file may hold")
    return rows


def _json_field(value: Any, name: str) -> Any:
    if isinstance(value, str) and name in ("reset", "solution"):
        return json.loads(value)
    return value


def task_of(row: Any, where: str) -> Task:
    """The task one row describes; ValueError starting with `where` (file and row) when it is malformed."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row is a JSON object (got {type(row).__name__})")
    unknown = sorted(set(row) - FIELDS)
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(FIELDS))})")
    try:
        row = {k: _json_field(v, k) for k, v in row.items() if v is not None}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: a JSON-text field does not parse ({exc.msg})") from None
    turns = row.get("turns") or ([row["prompt"]] if "prompt" in row else None)
    if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise ValueError(f"{where}: 'prompt' missing or empty (each row needs the user's message: 'prompt', "
                         "or 'turns', a list of them)")
    reset = row.get("reset", {})
    if not isinstance(reset, dict):
        raise ValueError(f"{where}: 'reset' is the reset's keyword arguments, an object (got {reset!r})")
    split, family = row.get("split", DEFAULT_SPLIT), row.get("family", DEFAULT_FAMILY)
    if not isinstance(split, str) or not split or not isinstance(family, str):
        raise ValueError(f"{where}: 'split' and 'family' are non-empty text (got {split!r}, {family!r})")
    try:
        solution = [[ToolCall(**c) for c in row["solution"]]] if "solution" in row else None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: 'solution' is a list of {{name, arguments}} calls ({exc})") from None
    if solution is not None and len(turns) != 1:
        raise ValueError(f"{where}: a 'solution' is given for one-turn tasks only ({len(turns)} turns)")
    task_id = Task.make_id(ENV_NAME, reset, list(turns), {})
    return Task(id=task_id, env=ENV_NAME, split=split, family=family, initial_state=reset, turns=list(turns),
                solution=solution)


def read_tasks(path: Path) -> dict[str, list[Task]]:
    """A task file's tasks by split, in file order (ValueError naming the file and row of a bad one)."""
    by_split: dict[str, list[Task]] = {}
    for number, row in enumerate(read_task_rows(path), 1):
        task = task_of(row, f"{path} row {number}")
        by_split.setdefault(task.split, []).append(task)
    return by_split


def provided_tasks(environment: Any) -> dict[str, list[Task]]:
    """The tasks of an environment's own task source (OpenEnv's `TaskProvider`: `list_splits`, `list_tasks`),
    each listed task a row of the file format above (it needs a `prompt`)."""
    by_split: dict[str, list[Task]] = {}
    for split in environment.list_splits():
        name = split if isinstance(split, str) else (split.get("name") if isinstance(split, dict) else str(split))
        for index, row in enumerate(environment.list_tasks(name)):
            row = dict(row.model_dump() if hasattr(row, "model_dump") else row)
            row = {k: v for k, v in row.items() if k in FIELDS - {"id"}}
            task = task_of({**row, "split": name}, f"the environment's task {name}[{index}]")
            by_split.setdefault(name, []).append(task)
    return by_split
