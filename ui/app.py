"""The web view's routes: Starlette, one function per page, each rendering one Jinja2 template.

Templates autoescape everything they print, so stored text (a model reply `<script>...`, a tool result
`</td>`) shows as the text it is. Only GET routes exist; the data comes from `RunsReader`, which never
writes. `serve` runs it under uvicorn, on 127.0.0.1 unless told otherwise; it answers only requests whose
Host header names it (loopback, or the address it was told) and is never framed (`host_guard`).

    coevolve ui --root runs --port 8420          # then open http://127.0.0.1:8420/
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import duckdb
import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from coevolve.contracts.signals import paper_kinds, signal_kinds
from coevolve.storage.parquet import ArtifactError
from coevolve.ui import queries
from coevolve.ui.charts import VERDICT_COLOURS, count_bars, curves, trl_curves
from coevolve.ui.evidence import evidence_rows
from coevolve.ui.host_guard import HostGuard
from coevolve.ui.lineage import task_page
from coevolve.ui.reader import RunsReader
from coevolve.ui.trajectory import trajectory_page

HERE = Path(__file__).resolve().parent
MAX_OVERLAID = 8
"""Runs overlaid on the front page when none are chosen (the newest by name)."""


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _when(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    return datetime.datetime.fromtimestamp(timestamp).isoformat(sep=" ", timespec="seconds")


def _pretty(value: Any, indent: int | None = 2) -> str:
    """JSON text indented (`indent=None`: on one line); anything that is not JSON, as stored."""
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=indent, ensure_ascii=False)


def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)  # fmt: skip
    env.filters.update(pct=_pct, num=_num, when=_when, pretty=_pretty, short=lambda v: (v or "")[:12],
                       compact=lambda v: _pretty(v, None))
    env.globals.update(evidence_rows=evidence_rows)
    return env


class Pages:
    """The page handlers over one reader and one template environment."""

    def __init__(self, reader: RunsReader) -> None:
        self.reader = reader
        self.env = templates()

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        def page_url(**changes: Any) -> str:
            params = {**dict(request.query_params), **changes}
            return "?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})

        html = self.env.get_template(name).render(root=str(self.reader.root), page_url=page_url, **context)
        return HTMLResponse(html, status_code=status)

    def runs(self, request: Request) -> HTMLResponse:
        names = self.reader.runs()
        chosen = [r for r in request.query_params.getlist("run") if r in names] or names[-MAX_OVERLAID:]
        metrics = queries.round_metrics(self.reader, chosen)
        overview = queries.runs_overview(self.reader, chosen, metrics)
        return self.render(request, "runs.html", runs=names, chosen=chosen, overview=overview,
                           charts=curves(metrics))  # fmt: skip

    def run(self, request: Request) -> HTMLResponse:
        run = self._run(request)
        metrics = queries.round_metrics(self.reader, [run])
        rounds, stale = self.reader.layout(run).rounds(), self.reader.stale(run)
        stale_rounds: dict[int, list[str]] = {}
        for s in stale:  # a round's figures come from its stages: a stale one makes them stale
            stale_rounds.setdefault(s["round"], []).append(s["stage"])
        trl = queries.trl_figures(self.reader, run)
        return self.render(request, "run.html", run=run, rounds=rounds, metrics=metrics[run],
                           charts=curves(metrics), config=self.reader.config(run), stale=stale,
                           stale_rounds=stale_rounds, trl=trl, trl_names=list(dict.fromkeys(
                               n for figures in trl.values() for n in figures)), trl_charts=trl_curves(run, trl),
                           evaluations=queries.fresh_evaluations(self.reader, run))  # fmt: skip

    def round(self, request: Request) -> HTMLResponse:
        run, round_ = self._run(request), int(request.path_params["round"])
        if round_ not in self.reader.layout(run).rounds():
            raise LookupError(f"run {run!r} has no round {round_}")
        source = request.query_params.get("source") or None
        episodes, page = queries.round_episodes(self.reader, run, round_, source, _page(request))
        stale = {s["stage"]: s["why"] for s in self.reader.stale(run) if s["round"] == round_}
        return self.render(request, "round.html", run=run, round=round_, stages=self.reader.stages(run, round_),
                           stale=stale, episodes=episodes, page=page, source=source,
                           sources=queries.round_sources(self.reader, run, round_))  # fmt: skip

    def trajectory(self, request: Request) -> Response:
        run, trajectory_id = self._run(request), request.path_params["trajectory_id"]
        found = trajectory_page(self.reader, run, trajectory_id)
        if found is None:
            return self.by_prefix(request, run, "trajectory", ("trajectories",), trajectory_id)
        return self.render(request, "trajectory.html", run=run, **found)

    def signals(self, request: Request) -> HTMLResponse:
        run, kind = self._run(request), request.query_params.get("kind") or None
        rows, page = queries.signal_rows(self.reader, run, kind, _page(request))
        kinds = queries.signal_kinds(self.reader, run)
        counts = queries.signal_counts(self.reader, run, kinds)
        chart = count_bars("signals", "signals per round, by kind", counts, kinds)
        about = {k.name: k.about for k in signal_kinds()}  # the kinds' contract (a run's unknown kind: none)
        return self.render(request, "signals.html", run=run, kind=kind, kinds=kinds, rows=rows, page=page,
                           counts=counts, chart=chart, about=about, paper=paper_kinds())  # fmt: skip

    def verifications(self, request: Request) -> HTMLResponse:
        run, outcome = self._run(request), request.query_params.get("outcome") or None
        rows, page = queries.candidate_rows(self.reader, run, outcome, _page(request))
        counts = queries.verification_counts(self.reader, run)
        codes, discards = queries.discard_reasons(self.reader, run)
        chart = count_bars("outcomes", "verification verdicts per round", counts, queries.OUTCOMES, VERDICT_COLOURS)
        return self.render(request, "verifications.html", run=run, outcome=outcome, rows=rows, page=page,
                           counts=counts, chart=chart, outcomes=(*queries.OUTCOMES, "unverified"),
                           codes=codes, discards=discards)  # fmt: skip

    def tasks(self, request: Request) -> HTMLResponse:
        run = self._run(request)
        rows, page = queries.synthesized_tasks(self.reader, run, _page(request))
        return self.render(request, "tasks.html", run=run, rows=rows, page=page)

    def task(self, request: Request) -> HTMLResponse:
        run, task_id = self._run(request), request.path_params["task_id"]
        found = task_page(self.reader, run, task_id)
        if found["task"] is None and not found["use"]:
            return self.by_prefix(request, run, "task", ("tasks", "trajectories"), task_id)
        return self.render(request, "task.html", run=run, task_id=task_id, **found)

    def by_prefix(self, request: Request, run: str, what: str, views: tuple[str, ...], prefix: str) -> Response:
        """An id prefix, as `coevolve show` takes one: the page of the one id it starts, a list of the ids
        when several match, 404 when none does."""
        column = f"{what}_id"
        ids = queries.ids_starting(self.reader, run, views, column, prefix)
        if not ids:
            raise LookupError(f"run {run!r} has no {what} whose id is or starts with {prefix!r}")
        folder = "trajectories" if what == "trajectory" else "tasks"
        if len(ids) == 1:
            return RedirectResponse(f"/runs/{quote(run)}/{folder}/{quote(ids[0], safe='')}", status_code=302)
        return self.render(request, "ids.html", run=run, what=what, folder=folder, prefix=prefix,
                           ids=ids[: queries.MAX_MATCHES], more=len(ids) > queries.MAX_MATCHES)  # fmt: skip

    def _run(self, request: Request) -> str:
        run = request.path_params["run"]
        self.reader.layout(run)  # LookupError (404) for a run that is not there
        return run

    def not_found(self, request: Request, exc: Exception) -> HTMLResponse:
        return self.render(request, "error.html", status=404, title="not found", message=str(exc))

    def unreadable(self, request: Request, exc: Exception) -> HTMLResponse:
        return self.render(request, "error.html", status=500, title="unreadable run file", message=str(exc))

    def query_failed(self, request: Request, exc: Exception) -> HTMLResponse:
        message = f"{exc}\n\nA file may be mid-rewrite (a stage re-running): reload in a moment."
        return self.render(request, "error.html", status=500, title="query failed", message=message)


def _page(request: Request) -> int:
    """The `page` parameter: up to 9 ASCII digits (`str.isdigit` passes `²`, which `int` refuses), else 0."""
    value = request.query_params.get("page", "0")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else 0


def create_app(root: Path, refresh_s: float = 30.0, *, served_on: str = "127.0.0.1") -> HostGuard:
    """The web view over the runs under `root`, answering only to loopback names and `served_on` (the
    address it listens on; `host_guard`)."""
    pages = Pages(RunsReader(root, refresh_s))
    routes = [
        Route("/", pages.runs),
        Route("/runs/{run}", pages.run),
        Route("/runs/{run}/rounds/{round:int}", pages.round),
        Route("/runs/{run}/trajectories/{trajectory_id}", pages.trajectory),
        Route("/runs/{run}/signals", pages.signals),
        Route("/runs/{run}/verifications", pages.verifications),
        Route("/runs/{run}/tasks", pages.tasks),
        Route("/runs/{run}/tasks/{task_id}", pages.task),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers = {LookupError: pages.not_found, duckdb.Error: pages.query_failed,
                ArtifactError: pages.unreadable}  # fmt: skip
    return HostGuard(Starlette(routes=routes, exception_handlers=handlers), served_on=served_on)


def serve(root: Path, host: str = "127.0.0.1", port: int = 8420) -> None:
    """Serve the view until interrupted."""
    import uvicorn

    print(f"CoEvolve runs under {root.resolve()}: http://{host}:{port}/  (read-only; Ctrl-C stops)", flush=True)
    app = create_app(root, served_on=host)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
