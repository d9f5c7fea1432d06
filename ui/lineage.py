"""A task's page: what it asks, and for a synthesized task the chain that produced it and what became of it.

    signal -> exploration -> triples -> candidate -> verification verdict -> the rounds it was drawn in

A task abstracted from one call of a group (`abstract.single_calls`) shows that group's triples, the call
marked (`parent_group_id`, `call_index` of its lineage).

Each link is one lookup by id through the task's `lineage` JSON (`stages/merge` writes it), filtered by
run, so the page costs a handful of indexed-by-partition queries however large the run is. A trajectory id
hashes what the episode was (`agents.ledger`): after a stage re-run that changed the signal's episode, its
id is in the run no more and the page says so, with why the signal is stale, instead of showing another
episode.
"""

from __future__ import annotations

import json
from typing import Any

from coevolve.ui.reader import RunsReader


def loads_json(value: str | None) -> Any:
    """A JSON column's value, or the text itself when it is not JSON (shown as stored)."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def find_task(reader: RunsReader, run: str, task_id: str) -> dict[str, Any] | None:
    """The task's first row in the run (its earliest round), with JSON columns parsed."""
    if not reader.has("tasks"):
        return None
    task = reader.one("SELECT * FROM tasks WHERE run = ? AND task_id = ? ORDER BY round LIMIT 1", [run, task_id])
    if task is None:
        return None
    for column in ("turns", "solution", "checker", "lineage", "initial_state"):
        task[column] = loads_json(task[column])
    return task


def _by_id(reader: RunsReader, view: str, column: str, run: str, value: str | None) -> dict[str, Any] | None:
    if not value or not reader.has(view):
        return None
    return reader.one(f"SELECT * FROM {view} WHERE run = ? AND {column} = ? ORDER BY round LIMIT 1", [run, value])


def lineage_chain(reader: RunsReader, run: str, lineage: dict[str, Any]) -> dict[str, Any]:
    """Every link the lineage names, each None where the run holds no such row."""
    verification = _by_id(reader, "verifications", "verification_id", run, lineage.get("verification_id"))
    chain: dict[str, Any] = {
        "signal": _by_id(reader, "signals", "signal_id", run, lineage.get("signal_id")),
        "exploration": _by_id(reader, "explorations", "exploration_id", run, lineage.get("exploration_id")),
        "candidate": verified_candidate(reader, run, lineage.get("candidate_id"), verification),
        "verification": verification,
        "triples": mark_call(lineage_triples(reader, run, lineage), lineage.get("call_index")),
    }
    chain["signal_trajectory"] = signal_trajectory(reader, run, chain["signal"])
    exploration = chain["exploration"]
    if exploration:
        episodes = loads_json(exploration.get("trajectory_ids"))
        exploration["episodes"] = episodes if isinstance(episodes, list) else []
    return chain


def signal_trajectory(reader: RunsReader, run: str, signal: dict[str, Any] | None) -> dict[str, Any] | None:
    """The episode a signal was made from: `{"trajectory": its row, "why": None}`, or, where the run holds
    no episode of that id any more (the stage that wrote it was re-run with other episodes, which got other
    ids), `{"trajectory": None, "why": ...}` naming the signal's stale stage. None without a signal."""
    if signal is None:
        return None
    trajectory = None
    if reader.has("trajectories"):
        trajectory = reader.one("""SELECT trajectory_id, round, stage, source, reward, success, finish FROM trajectories
                                   WHERE run = ? AND round = ? AND trajectory_id = ? LIMIT 1""",
                                [run, signal["trajectory_round"], signal["trajectory_id"]])  # fmt: skip
    if trajectory is not None:
        return {"trajectory": trajectory, "why": None}
    stale = {(s["round"], s["stage"]): s["why"] for s in reader.stale(run)}
    why = stale.get((signal["round"], signal["stage"]))
    if why is None:
        return {"trajectory": None, "why": f"not in the run: no trajectory of round {signal['trajectory_round']} "
                                          f"has this id"}  # fmt: skip
    return {"trajectory": None, "why": f"not in the run any more: its stage was re-run with other episodes, so "
                                      f"round {signal['round']} {signal['stage']} is stale ({why})"}  # fmt: skip


def verified_candidate(
    reader: RunsReader, run: str, candidate_id: str | None, verification: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The candidate row the verdict was given on, with its `label`. It is looked up in the verdict's round:
    a candidate id is a hash of the task's content, so the same task proposed again in a later round has
    the same id, and the earliest row may be another round's (another status, another verdict)."""
    candidate = None
    if verification is not None and candidate_id and reader.has("candidates"):
        candidate = reader.one("SELECT * FROM candidates WHERE run = ? AND round = ? AND candidate_id = ? LIMIT 1",
                               [run, verification["round"], candidate_id])  # fmt: skip
    candidate = candidate or _by_id(reader, "candidates", "candidate_id", run, candidate_id)
    if candidate is None:
        return None
    outcome = verification["outcome"] if verification else None
    twin = _twin_verdict(reader, run, candidate) if candidate["status"] == "duplicate" else None
    return {**candidate, "label": candidate_label(candidate["status"], candidate.get("duplicate_of"), outcome),
            "twin_verdict": twin}  # fmt: skip


def candidate_label(status: str, duplicate_of: str | None, outcome: str | None) -> str:
    """What a candidate was, said with what became of it. Abstraction marks `duplicate` a wording of the same
    solution as an earlier `ok` candidate; verification checks such a wording in place of its twin when the
    environment checks discard the twin (`stages.verify.verification.sibling_duplicates`), so an admitted
    `duplicate` is the wording that stood for the solution, not a duplicate admitted twice."""
    if status != "duplicate":
        return status
    twin = duplicate_of or "an earlier candidate"
    if outcome in ("accept", "retain"):
        return f"stood in for {twin}: the same solution, verified in its place after the checks discarded {twin}"
    if outcome == "discard":
        return f"a rewording of {twin}, checked in its place and discarded too"
    return f"near-duplicate of {twin}, not verified itself"


def _twin_verdict(reader: RunsReader, run: str, candidate: dict[str, Any]) -> dict[str, Any] | None:
    """The verdict on the candidate a `duplicate` duplicates, in the same round (None: not a candidate)."""
    if not candidate.get("duplicate_of") or not reader.has("verifications"):
        return None
    return reader.one("SELECT candidate_id, outcome, reason FROM verifications WHERE run = ? AND round = ? "
                      "AND candidate_id = ? LIMIT 1", [run, candidate["round"], candidate["duplicate_of"]])  # fmt: skip


def lineage_triples(reader: RunsReader, run: str, lineage: dict[str, Any]) -> list[dict[str, Any]]:
    """The triples of the group the task was abstracted from: a one-call group's parent (`parent_group_id`),
    whose id the triples carry, the one-call group's own id being on the candidate only. In a run written
    before one-call groups named their parent (a hashed id, no `parent_group_id`) the triples are found
    through the exploration: its context is one group (`stages.triples.grouping.group_id`)."""
    if not reader.has("triples"):
        return []
    group = lineage.get("parent_group_id") or lineage.get("group_id")
    rows = _triples(reader, run, "group_id", group)
    return rows or _triples(reader, run, "exploration_id", lineage.get("exploration_id"))


def _triples(reader: RunsReader, run: str, column: str, value: str | None) -> list[dict[str, Any]]:
    if not value:
        return []
    return reader.rows(
        f"""SELECT seq, trajectory_id, group_id, exploration_id, tool, arguments, ok, observation, changed
            FROM triples WHERE run = ? AND {column} = ? ORDER BY trajectory_id, seq LIMIT 200""",
        [run, value],
    )


def mark_call(triples: list[dict[str, Any]], call_index: str | None) -> list[dict[str, Any]]:
    """`triples` with `abstracted` set on the rows of a one-call group's call: the `call_index`-th distinct
    successful (tool, arguments) in episode order, as `stages.abstract.abstraction.build_groups` numbers them."""
    calls = list(dict.fromkeys((t["tool"], t["arguments"]) for t in triples if t["ok"]))
    at = int(call_index) if str(call_index).isdigit() else -1
    picked = calls[at] if 0 <= at < len(calls) else None
    return [{**t, "abstracted": t["ok"] and (t["tool"], t["arguments"]) == picked} for t in triples]


def task_use(reader: RunsReader, run: str, task_id: str) -> list[dict[str, Any]]:
    """Per round and stage: the task's episodes and how many solved it (rollouts: the rounds it was drawn in)."""
    if not reader.has("trajectories"):
        return []
    return reader.rows(
        """SELECT round, stage, source, count(*) AS episodes, sum(success::INT) AS solved, avg(reward) AS reward,
                  min(trajectory_id) AS example
           FROM trajectories WHERE run = ? AND task_id = ? GROUP BY ALL ORDER BY round, stage, source""",
        [run, task_id],
    )


def task_versions(reader: RunsReader, run: str, task_id: str) -> list[dict[str, Any]]:
    """The dataset versions that hold the task, with its sampling weight in each."""
    if not reader.has("datasets"):
        return []
    return reader.rows("""SELECT dataset_version, weight, added_round FROM datasets
                          WHERE run = ? AND task_id = ? ORDER BY dataset_version""", [run, task_id])  # fmt: skip


def task_page(reader: RunsReader, run: str, task_id: str) -> dict[str, Any]:
    """Everything the task page shows; `task` is None for an id outside every dataset (an eval task)."""
    task = find_task(reader, run, task_id)
    lineage = task["lineage"] if task and isinstance(task["lineage"], dict) else {}
    return {
        "task": task,
        "lineage": lineage,
        "chain": lineage_chain(reader, run, lineage) if lineage else None,
        "use": task_use(reader, run, task_id),
        "versions": task_versions(reader, run, task_id),
    }
