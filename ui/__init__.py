"""`coevolve ui`: a read-only local web view of the runs under a storage root.

Server-rendered HTML (Starlette + Jinja2, both already installed with Prefect) over the DuckDB views of
`storage.catalog` and the stage manifests; charts (`charts.py`: curves as lines over whole rounds, counts
as bars, the zero-shot baseline as a dashed line) drawn in the browser by uPlot, a 50 kB file vendored
under `static/` (no CDN, nothing fetched at run time). Pages: runs with their curves, one run's rounds,
a round's stages and episodes, a trajectory with its tokens, signals, verification outcomes, synthesized
tasks and a task's lineage. Every query filters and limits in SQL, so pages stay fast on large runs
(`coevolve bench ui-pages`). The view never writes under the storage root.

    coevolve ui [--root runs] [--port 8420] [--host 127.0.0.1]
"""
