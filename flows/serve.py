"""Serve the `coevolve` flow as deployment `coevolve/round`, and check the Prefect server first.

    PREFECT_SERVER_ANALYTICS_ENABLED=false prefect server start --host 127.0.0.1 --port 4200
    PREFECT_API_URL=http://127.0.0.1:4200/api coevolve serve
    prefect deployment run coevolve/round -p config=configs/test-tiny.yaml -p run=demo -p more=1 --watch

`coevolve serve` polls the server for runs of the deployment (every PREFECT_RUNNER_POLL_FREQUENCY
seconds, default 10) and executes each in a subprocess of this one, with this process's environment
(COEVOLVE_HOME, working directory for relative config paths). `prefect.yaml` declares the same
deployment for work pools.
"""

from __future__ import annotations

from pathlib import Path

from coevolve.flows.prefect_api import SERVER_COMMAND, configured_api_url, healthy
from coevolve.loopback import direct_loopback

API_URL_EXAMPLE = "http://127.0.0.1:4200/api"


def api_problem(*, required: bool, timeout: float = 3.0) -> str | None:
    """None if the configured Prefect API answers (or none is configured and none is `required`);
    otherwise one paragraph saying what is wrong and the command that fixes it."""
    url = configured_api_url()
    if not url:
        if not required:
            return None  # `coevolve run` uses a temporary in-process API
        return (f"`coevolve serve` needs a Prefect server, and PREFECT_API_URL is not set. Start a server in "
                f"another terminal with `{SERVER_COMMAND}`, then run "
                f"`PREFECT_API_URL={API_URL_EXAMPLE} coevolve serve`.")
    if healthy(url, timeout):
        return None
    fallback = "" if required else " or unset PREFECT_API_URL to run on a temporary local server,"
    return (f"no Prefect server answers at PREFECT_API_URL={url}. Start one in another terminal with "
            f"`{SERVER_COMMAND}` (and PREFECT_API_URL={API_URL_EXAMPLE}),{fallback} then try again.")


def serve_deployment(name: str = "round", *, limit: int | None = 1, root: Path | None = None) -> None:
    """Block, serving `coevolve/<name>`; each triggered run executes the flow in a subprocess, its runs
    under `root` (the deployment's default `root` parameter; default: `storage_root`'s rule)."""
    from prefect.deployments.runner import EntrypointType

    from coevolve.flows.coevolve import coevolve

    with direct_loopback():  # a server on loopback is polled directly, whatever proxy the environment names
        coevolve.serve(
            name=name,
            description="Run the next round(s) of a CoEvolve run: -p config=CONFIG -p run=NAME -p more=1",
            tags=["coevolve"],
            limit=limit,
            parameters={"root": str(root)} if root is not None else None,
            entrypoint_type=EntrypointType.MODULE_PATH,
        )
