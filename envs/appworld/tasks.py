"""AppWorld tasks: task ids per split, `Task` rows, the `execute` tool schema, and the TGC / SGC metrics.

AppWorld's server can show one task (`GET /tasks/{id}`) but cannot list a split, so task ids come from:
1. the env option `split_tasks` ({split: [ids]} or {split: "path/to/ids.txt"}, one id per line), else
2. AppWorld's own split files `<data root>/data/datasets/<split>.txt`, written by `appworld download
   data`; the data root is the option `data_root`, else `$APPWORLD_ROOT`, else the current folder (where
   the setup commands put it).
A task's instruction and supervisor come from `<data root>/data/tasks/<id>/specs.json` when that file is
here, else from the server; both give the same `Task` (same content hash).

Metrics (AppWorld paper): TGC = share of tasks whose tests all pass; SGC = share of scenarios (task-id
prefix before `_`, three tasks each) whose tasks all pass.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from coevolve.envs.appworld.client import AppWorldClient, AppWorldError
from coevolve.envs.base import Task

ENV_NAME = "appworld"
SPLITS = ("train", "dev", "test_normal", "test_challenge")
"""AppWorld's splits (90 / 57 / 168 / 417 tasks)."""
_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SUPERVISOR_FIELDS = ("first_name", "last_name", "email", "phone_number")

SplitTasks = Mapping[str, "list[str] | tuple[str, ...] | str | os.PathLike[str]"]

EXECUTE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "execute",
        "description": (
            "Run Python code in the AppWorld sandbox and see what it prints; variables persist between "
            "calls. Apps are used through `apis.<app>.<api>(...)`: list the apps with "
            "`print(apis.api_docs.show_app_descriptions())`, an app's APIs with "
            "`print(apis.api_docs.show_api_descriptions(app_name='spotify'))`, one API's parameters with "
            "`print(apis.api_docs.show_api_doc(app_name='spotify', api_name='login'))`. Account passwords: "
            "`apis.supervisor.show_account_passwords()`. Finish with "
            "`apis.supervisor.complete_task(answer=...)` (pass `answer` only when the task asks a "
            "question), which ends the task."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code to run."}},
            "required": ["code"],
        },
    },
}


def scenario_id(task_id: str) -> str:
    """The scenario of a task: its id up to the first `_` (`82e2fac_1` -> `82e2fac`)."""
    return task_id.split("_", 1)[0]


def _successes_by(results: Mapping[str, bool] | Iterable[tuple[str, bool]], key: Any) -> dict[str, bool]:
    """All-pass per `key(task_id)`; a task listed several times (K samples) must pass every time."""
    items = results.items() if isinstance(results, Mapping) else results
    grouped: dict[str, bool] = {}
    for task_id, success in items:
        k = key(task_id)
        grouped[k] = grouped.get(k, True) and bool(success)
    return grouped


def task_goal_completion(results: Mapping[str, bool] | Iterable[tuple[str, bool]]) -> float:
    """TGC in [0, 1]: share of tasks whose tests all pass (`results`: AppWorld task id -> success)."""
    grouped = _successes_by(results, lambda task_id: task_id)
    return sum(grouped.values()) / len(grouped) if grouped else 0.0


def scenario_goal_completion(results: Mapping[str, bool] | Iterable[tuple[str, bool]]) -> float:
    """SGC in [0, 1]: share of scenarios all of whose listed tasks succeed (task id -> success)."""
    grouped = _successes_by(results, scenario_id)
    return sum(grouped.values()) / len(grouped) if grouped else 0.0


def data_root(option: str | os.PathLike[str] | None) -> Path:
    """Where AppWorld's `data/` folder is looked for: the option, else $APPWORLD_ROOT, else here."""
    return Path(option or os.environ.get("APPWORLD_ROOT") or ".").expanduser()


def task_ids(split: str, split_tasks: SplitTasks | None, root: Path) -> list[str]:
    """The task ids of `split`, from `split_tasks` or AppWorld's split file; raises AppWorldError if none."""
    source = (split_tasks or {}).get(split)
    if isinstance(source, list | tuple):
        ids, origin = [str(i).strip() for i in source], "option split_tasks"
    else:
        path = Path(source) if source is not None else root / "data" / "datasets" / f"{split}.txt"
        if not path.is_file():
            raise AppWorldError(_no_ids_message(split, path, explicit=source is not None))
        ids = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
        origin = str(path)
    ids = [i for i in ids if i]
    bad = next((i for i in ids if not _TASK_ID.match(i)), None)
    if bad is not None:
        raise ValueError(f"{origin}: {bad[:80]!r} is not an AppWorld task id (like 82e2fac_1)")
    return list(dict.fromkeys(ids))


def _no_ids_message(split: str, path: Path, *, explicit: bool) -> str:
    if explicit:
        return f"split_tasks[{split!r}]: file {path} not found (one AppWorld task id per line)"
    return (
        f"no task ids for AppWorld split {split!r}: {path.absolute()} does not exist. AppWorld's server "
        "cannot list a split, so the ids come from its data folder: run `appworld download data` there (it "
        "writes data/datasets/<split>.txt), point the env option `data_root` or $APPWORLD_ROOT at the "
        f"folder holding data/, or pass the env option split_tasks={{{split!r}: [ids] or 'ids.txt'}}"
    )


def task_info(task_id: str, root: Path, client: AppWorldClient) -> dict[str, Any]:
    """`instruction` and `supervisor` of a task: from its local specs.json, else from the server."""
    specs = root / "data" / "tasks" / task_id / "specs.json"
    if specs.is_file():
        info = json.loads(specs.read_text(encoding="utf-8"))
    else:
        info = client.get(f"/tasks/{urllib.parse.quote(task_id, safe='')}")
    if not isinstance(info, dict) or not isinstance(info.get("instruction"), str):
        where = specs if specs.is_file() else "the server's answer"
        raise AppWorldError(f"AppWorld task {task_id}: no instruction in {where}")
    return info


def render_instruction(info: Mapping[str, Any]) -> str:
    """The first user turn: the task's instruction, then who the supervisor (the user) is."""
    supervisor = info.get("supervisor") if isinstance(info.get("supervisor"), Mapping) else {}
    values = {field: str(supervisor.get(field) or "").strip() for field in _SUPERVISOR_FIELDS}
    text = str(info["instruction"]).strip()
    name = f"{values['first_name']} {values['last_name']}".strip()
    if name:
        contact = ", ".join(
            f"{label} {values[field]}"
            for label, field in (("email", "email"), ("phone number", "phone_number"))
            if values[field]
        )
        text += f"\n\nI am {name}" + (f" ({contact})" if contact else "") + "."
    return text


def build_task(split: str, task_id: str, info: Mapping[str, Any]) -> Task:
    """A benchmark `Task`: one user turn, `initial_state={"task_id": ...}`, family = scenario id."""
    turns = [render_instruction(info)]
    initial_state = {"task_id": task_id}
    return Task(
        id=Task.make_id(ENV_NAME, initial_state, turns, {}),
        env=ENV_NAME,
        split=split,
        family=scenario_id(task_id),
        initial_state=initial_state,
        turns=turns,
        source="benchmark",
        lineage={"appworld_task_id": task_id},
    )
