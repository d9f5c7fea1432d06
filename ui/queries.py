"""The SQL behind the web view's pages: per-round curves, a round's episodes, signals, verification
outcomes; `ui.charts` turns the per-round figures into chart specs. The vocabularies (signal kinds,
candidate statuses, verdicts, reason codes) and the counting rule come from the phases' contracts
(`coevolve.contracts`), so a kind or a check a package adds has its column here. Every query filters on `run` (and `round` or `stage` where it can: hive columns, so DuckDB
reads only those files), aggregates or pages in SQL, and returns at most a page of rows to Python.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from coevolve.contracts.abstract import STATUSES
from coevolve.contracts.counts import CandidateCounts, count_columns_sql
from coevolve.contracts.signals import paper_kinds
from coevolve.contracts.verify import OTHER, VERDICTS, Verdict, reason_code_sql, reasons
from coevolve.rl.rollout_metrics import TRL_NAMES
from coevolve.storage.parquet import ArtifactError
from coevolve.ui.lineage import candidate_label
from coevolve.ui.reader import RunsReader

PER_PAGE = 50
CURVES = {
    "train_success": "train success (rollouts)",
    "heldout_success": "held-out success (after the round's update)",
    "train_reward": "train reward (rollouts)",
    "loss": "GRPO loss",
    "kl": "KL to the reference",
    "dataset_size": "dataset size |D_v| (trained on from round v)",
}
"""Chart key -> title; the keys are columns of `round_metrics` (drawn by `ui.charts`)."""
SAMPLING_NAMES = {f"is_ratio_{s}": f"sampling/importance_sampling_ratio/{s}" for s in ("min", "mean", "max")}
"""The update's importance-sampling weights (`rl.update_metrics.weight_record`, per optimizer step) under TRL's
names; a round's value is the min of the steps' minima, the mean of their means, the max of their maxima."""
OUTCOMES = VERDICTS
MAX_MATCHES = 50
"""Ids listed at most for an id prefix that matches several."""


@dataclass(frozen=True)
class Page:
    """One page of a listing: its number (from 0), the rows per page and how many rows match in all."""

    number: int
    total: int
    per_page: int = PER_PAGE

    @property
    def offset(self) -> int:
        return self.number * self.per_page

    @property
    def last(self) -> int:
        return max(0, (self.total - 1) // self.per_page)


def _in(values: list[str]) -> str:
    return "(" + ", ".join("?" for _ in values) + ")"


def _metric_queries(reader: RunsReader, runs: list[str]) -> list[tuple[str, list[Any]]]:
    """(SQL, params) per view present; each returns `run`, `round` and metric columns."""
    where = f"run IN {_in(runs)}"
    candidates = {
        "trajectories": f"""SELECT run, round, avg(success::INT) AS train_success, avg(reward) AS train_reward,
                            count(*) AS train_episodes FROM trajectories
                            WHERE stage = 'rollout' AND {where} GROUP BY ALL""",
        "evals": f"""SELECT run, round, avg(success::INT) FILTER (WHERE stage = 'evaluate') AS heldout_success,
                     avg(success::INT) FILTER (WHERE stage = 'baseline') AS zero_shot_success
                     FROM evals WHERE {where} GROUP BY ALL""",
        "updates": f"SELECT run, round, avg(loss) AS loss, avg(kl) AS kl FROM updates WHERE {where} GROUP BY ALL",
        "datasets": f"""SELECT run, dataset_version AS round, count(DISTINCT task_id) AS dataset_size
                        FROM datasets WHERE {where} GROUP BY ALL""",
        "signals": f"""SELECT run, round, count(*) AS signals FROM signals WHERE {where} GROUP BY ALL""",
        "verifications": f"""SELECT run, round, count(*) FILTER (WHERE outcome = '{Verdict.ACCEPT}') AS accepted,
                             count(*) AS verified FROM verifications WHERE {where} GROUP BY ALL""",
    }
    return [(sql, list(runs)) for view, sql in candidates.items() if reader.has(view)]


def round_metrics(reader: RunsReader, runs: list[str]) -> dict[str, dict[int, dict[str, Any]]]:
    """run -> round -> metric -> value, for the curves and the rounds table."""
    out: dict[str, dict[int, dict[str, Any]]] = {run: defaultdict(dict) for run in runs}
    if not runs:
        return out
    for sql, params in _metric_queries(reader, runs):
        for row in reader.rows(sql, params):
            run, round_ = row.pop("run"), int(row.pop("round"))
            out[run][round_].update(row)
    return {run: _trained_on(dict(sorted(rounds.items()))) for run, rounds in out.items()}


def _trained_on(rounds: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """`dataset_size` of every round that trained: that of the newest version it drew from (D_v is used from
    round v on, and a round with no merge before it draws from the last version written)."""
    versions = sorted((r, m["dataset_size"]) for r, m in rounds.items() if m.get("dataset_size") is not None)
    for round_, metrics in rounds.items():
        older = [size for version, size in versions if version <= round_]
        if metrics.get("dataset_size") is None and metrics.get("train_episodes") and older:
            metrics["dataset_size"] = older[-1]
    return rounds


def trl_figures(reader: RunsReader, run: str) -> dict[int, dict[str, float]]:
    """round -> TRL's name -> value: the rollout's figures of a generation batch (`rl.rollout_metrics`) and the
    update's importance-sampling weights, read from the two stages' manifests (absent where a stage did not
    record them: a rollout from before them, an update that corrected nothing)."""
    out: dict[int, dict[str, float]] = {}
    for round_ in reader.layout(run).rounds():
        figures: dict[str, float] = {}
        rollout = reader.manifest(run, round_, "rollout")
        for key, name in TRL_NAMES.items():
            if rollout is not None and isinstance(rollout.outputs.get(key), int | float):
                figures[name] = float(rollout.outputs[key])
        update = reader.manifest(run, round_, "grpo_update")
        steps = [s for s in (update.outputs.get("steps") or []) if "is_ratio_mean" in s] if update else []
        if steps:
            pick = {"min": min, "max": max, "mean": lambda values: sum(values) / len(values)}
            for key, name in SAMPLING_NAMES.items():
                figures[name] = float(pick[key.rsplit("_", 1)[1]]([s[key] for s in steps]))
        if figures:
            out[round_] = figures
    return out


def runs_overview(reader: RunsReader, runs: list[str], metrics: dict) -> list[dict[str, Any]]:
    """One row per run: model, environment, rounds trained, the last figures of each curve, its stale stages."""
    rows = []
    for run in runs:
        config, rounds = reader.config(run), metrics.get(run, {})
        last = {key: _last(rounds, key) for key in (*CURVES, "zero_shot_success")}
        trained = sum(1 for m in rounds.values() if m.get("train_episodes"))
        rows.append({"run": run, "model": (config.get("model") or {}).get("name"),
                     "env": (config.get("env") or {}).get("name"), "rounds": trained, **last,
                     **_stale_or_why_not(reader, run)})  # fmt: skip
    return rows


def _stale_or_why_not(reader: RunsReader, run: str) -> dict[str, Any]:
    """`stale`: the run's stale stages (`RunsReader.stale`); `unreadable`: why they could not be told (a
    manifest of the wrong shape, named), so one such run leaves the others listed."""
    try:
        return {"stale": reader.stale(run), "unreadable": None}
    except ArtifactError as exc:
        return {"stale": [], "unreadable": str(exc)}


def _last(rounds: dict[int, dict[str, Any]], key: str) -> Any:
    values = [m[key] for _, m in sorted(rounds.items()) if m.get(key) is not None]
    return values[-1] if values else None


def round_episodes(reader: RunsReader, run: str, round_: int, source: str | None, page: int) -> tuple[list, Page]:
    """A page of the round's episodes (every stage that plays some), optionally of one source."""
    if not reader.has("trajectories"):
        return [], Page(0, 0)
    where, params = "run = ? AND round = ?", [run, round_]
    if source:
        where, params = where + " AND source = ?", [*params, source]
    total = reader.one(f"SELECT count(*) AS n FROM trajectories WHERE {where}", params)["n"]
    at = Page(page, total)
    rows = reader.rows(
        f"""SELECT trajectory_id, stage, source, task_id, sample, policy_version, reward, success, finish,
                   num_turns, num_steps, num_tool_calls, num_tool_errors, completion_tokens
            FROM trajectories WHERE {where}
            ORDER BY stage, source, task_id, sample, trajectory_id LIMIT ? OFFSET ?""",
        [*params, at.per_page, at.offset],
    )
    return rows, at


def round_sources(reader: RunsReader, run: str, round_: int) -> list[str]:
    if not reader.has("trajectories"):
        return []
    rows = reader.rows("SELECT DISTINCT source FROM trajectories WHERE run = ? AND round = ? ORDER BY 1", [run, round_])
    return [r["source"] for r in rows]


def signal_kinds(reader: RunsReader, run: str) -> tuple[str, ...]:
    """The paper's signal kinds, then every other kind the run's signals hold (an extension's), by name."""
    paper = paper_kinds()
    if not reader.has("signals"):
        return paper
    found = [r["kind"] for r in reader.rows("SELECT DISTINCT kind FROM signals WHERE run = ? ORDER BY kind", [run])]
    return (*paper, *(kind for kind in found if kind not in paper))


def signal_counts(reader: RunsReader, run: str, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per round: signals of each of `kinds` (0 where none) and the tasks they mark."""
    if not reader.has("signals"):
        return []
    by_kind: dict[int, dict[str, int]] = defaultdict(dict)
    for r in reader.rows("SELECT round, kind, count(*) AS n FROM signals WHERE run = ? GROUP BY ALL", [run]):
        by_kind[r["round"]][r["kind"]] = r["n"]
    rows = reader.rows("""SELECT round, count(*) AS signals, count(DISTINCT task_id) AS tasks FROM signals
                          WHERE run = ? GROUP BY round ORDER BY round""", [run])  # fmt: skip
    return [{"round": r["round"], **{kind: by_kind[r["round"]].get(kind, 0) for kind in kinds},
             "signals": r["signals"], "tasks": r["tasks"]} for r in rows]  # fmt: skip


def signal_rows(reader: RunsReader, run: str, kind: str | None, page: int) -> tuple[list, Page]:
    """A page of signals with the synthesized tasks each led to (through the tasks' lineage)."""
    if not reader.has("signals"):
        return [], Page(0, 0)
    where, params = "s.run = ?", [run]
    if kind:
        where, params = where + " AND s.kind = ?", [run, kind]
    total = reader.one(f"SELECT count(*) AS n FROM signals s WHERE {where}", params)["n"]
    at = Page(page, total)
    produced = ("""(SELECT json_extract_string(lineage, '$.signal_id') AS signal_id,
                           list(DISTINCT task_id ORDER BY task_id) AS new_tasks
                    FROM tasks WHERE run = ? AND source = 'synthesized' GROUP BY 1)"""
                if reader.has("tasks") else "(SELECT NULL::VARCHAR AS signal_id, []::VARCHAR[] AS new_tasks)")  # fmt: skip
    extra = [run] if reader.has("tasks") else []
    rows = reader.rows(
        f"""SELECT s.round, s.kind, s.signal_id, s.task_id, s.trajectory_id, s.trajectory_round, s.evidence,
                   coalesce(p.new_tasks, []) AS new_tasks
            FROM signals s LEFT JOIN {produced} p USING (signal_id)
            WHERE {where} ORDER BY s.round, s.kind, s.signal_id LIMIT ? OFFSET ?""",
        [*extra, *params, at.per_page, at.offset],
    )
    return rows, at


def verification_counts(reader: RunsReader, run: str) -> list[dict[str, Any]]:
    """Per round: candidates by status (`ok`: a distinct solution), then the verdicts per distinct solution
    and the wordings verification checked (its rows), counted by `coevolve.contracts.counts.CandidateCounts`,
    as the round line and `coevolve evolution` count them: a solution is accepted or retained when one of
    its wordings was, discarded when none was."""
    if not reader.has("candidates"):
        return []
    rows = reader.rows(f"SELECT round, {count_columns_sql('status', STATUSES)} FROM candidates WHERE run = ? "
                       "GROUP BY round ORDER BY round", [run])  # fmt: skip
    verified = reader.has("verifications")
    verdicts = {r["round"]: r for r in reader.rows(
        f"SELECT round, {count_columns_sql('outcome', VERDICTS)} FROM verifications WHERE run = ? GROUP BY round",
        [run])} if verified else {}  # fmt: skip
    out = []
    for row in rows:
        counts = CandidateCounts.of(row, verdicts.get(row["round"]))
        out.append({**row, "candidates": counts.candidates})
        if verified:
            out[-1].update(accept=counts.accept or 0, retain=counts.retain or 0, discard=counts.discard or 0,
                           checked=counts.wordings_checked or 0)
    return out


def discard_reasons(reader: RunsReader, run: str) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The reason codes of the run's discarded verification rows (`coevolve.contracts.verify`: the declared
    ones in their order, then `other`), and per round the rows discarded under each."""
    if not reader.has("verifications"):
        return (), []
    found = reader.rows(f"""SELECT round, {reason_code_sql()} AS code, count(*) AS n FROM verifications
                            WHERE run = ? AND outcome = '{Verdict.DISCARD}' GROUP BY ALL""", [run])  # fmt: skip
    present = {r["code"] for r in found}
    codes = tuple(c for c in (*(r.code for r in reasons()), OTHER) if c in present)
    by_round: dict[int, dict[str, Any]] = defaultdict(dict)
    for r in found:
        by_round[r["round"]][r["code"]] = r["n"]
    return codes, [{"round": r, **{c: n.get(c, 0) for c in codes}} for r, n in sorted(by_round.items())]


def candidate_rows(reader: RunsReader, run: str, outcome: str | None, page: int) -> tuple[list, Page]:
    """A page of candidates with their verdict; `outcome` filters (`unverified`: none)."""
    if not reader.has("candidates"):
        return [], Page(0, 0)
    verified = reader.has("verifications")
    join = ("LEFT JOIN verifications v ON v.run = c.run AND v.round = c.round AND v.candidate_id = c.candidate_id"
            if verified else "")  # fmt: skip
    verdict = ("v.outcome, v.reason AS verdict_reason, v.reward, v.attempts, v.task_id AS admitted_task"
               if verified else "NULL AS outcome, NULL AS verdict_reason, NULL AS reward, NULL AS attempts, "
               "NULL AS admitted_task")  # fmt: skip
    where, params = "c.run = ?", [run]
    if outcome:
        where, params = where + " AND coalesce(outcome, 'unverified') = ?", [run, outcome]
    base = f"FROM candidates c {join} WHERE {where}"
    total = reader.one(f"SELECT count(*) AS n {base}", params)["n"]
    at = Page(page, total)
    rows = reader.rows(
        f"""SELECT c.round, c.candidate_id, c.status, c.duplicate_of, c.reason, c.query, {verdict} {base}
            ORDER BY c.round, c.candidate_id LIMIT ? OFFSET ?""",
        [*params, at.per_page, at.offset],
    )
    return [{**r, "label": candidate_label(r["status"], r["duplicate_of"], r["outcome"])} for r in rows], at


def synthesized_tasks(reader: RunsReader, run: str, page: int) -> tuple[list, Page]:
    """A page of the run's synthesized tasks: the signal behind each, how often it was drawn and solved."""
    if not reader.has("tasks"):
        return [], Page(0, 0)
    tasks = """SELECT task_id, min(round) AS round, any_value(family) AS family, any_value(turns) AS turns,
                      any_value(json_extract_string(lineage, '$.signal_kind')) AS signal_kind
               FROM tasks WHERE run = ? AND source = 'synthesized' GROUP BY task_id"""
    total = reader.one(f"SELECT count(*) AS n FROM ({tasks})", [run])["n"]
    at = Page(page, total)
    drawn = ("""SELECT task_id, count(*) AS episodes, sum(success::INT) AS solved, count(DISTINCT round) AS rounds
                FROM trajectories WHERE run = ? AND stage = 'rollout' AND task_id IN (SELECT task_id FROM page)
                GROUP BY task_id""" if reader.has("trajectories") else
             "SELECT NULL::VARCHAR AS task_id, 0 AS episodes, 0 AS solved, 0 AS rounds")  # fmt: skip
    extra = [run] if reader.has("trajectories") else []
    rows = reader.rows(
        f"""WITH page AS (SELECT * FROM ({tasks}) ORDER BY round, task_id LIMIT ? OFFSET ?),
                 drawn AS ({drawn})
            SELECT page.*, json_extract_string(turns, '$[0]') AS first_turn, coalesce(episodes, 0) AS episodes,
                   coalesce(solved, 0) AS solved, coalesce(rounds, 0) AS rounds
            FROM page LEFT JOIN drawn USING (task_id) ORDER BY round, task_id""",
        [run, at.per_page, at.offset, *extra],
    )
    return rows, at


def fresh_evaluations(reader: RunsReader, run: str) -> list[dict[str, Any]]:
    """The run's `coevolve eval` results (the `evaluations` view), a row per policy, environment, seed and
    split, each beside the initial policy's success on the same tasks when that was scored (round -1)."""
    if not reader.has("evaluations"):
        return []
    return reader.rows(
        """SELECT e.round, e.env, e.env_seed, e.split, e.tasks, e.samples, e.success, e.policy_version,
                  e.tasks_key, b.success AS initial_success
           FROM evaluations e LEFT JOIN evaluations b ON b.run = e.run AND b.round = -1 AND e.round >= 0
                AND b.tasks_key = e.tasks_key AND b.split = e.split
           WHERE e.run = ? AND (e.round >= 0 OR NOT EXISTS (
                 SELECT 1 FROM evaluations o WHERE o.run = e.run AND o.round >= 0 AND o.tasks_key = e.tasks_key))
           ORDER BY e.env, e.env_seed NULLS FIRST, e.split, e.round""",
        [run],
    )


def ids_starting(reader: RunsReader, run: str, views: tuple[str, ...], column: str, prefix: str) -> list[str]:
    """The distinct ids of `column` in `views` of the run that start with `prefix` (at most `MAX_MATCHES` + 1,
    so a caller can tell that there are more), as `coevolve show` matches them."""
    present = [view for view in views if reader.has(view)]
    if not present or not prefix:
        return []
    union = " UNION ".join(f"SELECT {column} AS id FROM {view} WHERE run = ? AND starts_with({column}, ?)"
                           for view in present)  # fmt: skip
    params = [value for _ in present for value in (run, prefix)]
    rows = reader.rows(f"SELECT DISTINCT id FROM ({union}) ORDER BY id LIMIT ?", [*params, MAX_MATCHES + 1])
    return [r["id"] for r in rows]
