"""The evaluations `coevolve eval` filed beside a run (`flows/reevaluate.py`), read back for `coevolve runs`:
its newest one in a few words, beside the initial policy's score on the same tasks when it was asked for.

Reads only the `evaluation.json` of each folder (no model, no DuckDB), so listing runs stays instant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coevolve.storage.catalog import EVALUATIONS_FOLDER


def stored_evaluations(root: Path, run: str) -> list[dict[str, Any]]:
    """The summaries of every evaluation of `run` under `root`, oldest first (a folder without a readable
    summary, one still being written, is left out)."""
    found = []
    for path in (root / EVALUATIONS_FOLDER / f"run={run}").glob("round=*/stage=*/evaluation.json"):
        try:
            found.append((path.stat().st_mtime, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return [summary for _, summary in sorted(found, key=lambda pair: pair[0])]


def newest_evaluation(root: Path, run: str) -> str | None:
    """`coevolve runs`' cell: the newest evaluation of a trained round ("r1 seed 9001: validation 40% vs
    initial 25%"), with how many more are stored; None when there is none."""
    summaries = stored_evaluations(root, run)
    rounds = [s for s in summaries if s["round"] >= 0]
    if not rounds:
        return f"initial policy only ({len(summaries)})" if summaries else None
    last = rounds[-1]
    base = next((s for s in summaries if s["round"] < 0 and s.get("tasks_key") == last.get("tasks_key")), None)
    seed = last["options"].get("seed")
    where = last["env"] + (f" seed {seed}" if seed is not None else "")
    splits = ", ".join(f"{split} {value:.0%}" + (f" vs initial {base['success'][split]:.0%}" if base else "")
                       for split, value in last["success"].items())  # fmt: skip
    more = f" (+{len(rounds) - 1} more)" if len(rounds) > 1 else ""
    return f"r{last['round']} {where}: {splits}{more}"
