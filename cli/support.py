"""What the `coevolve` commands share: the `--set` and `--root` options, one-paragraph errors, the run's
folder, quiet libraries and the Prefect API check."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

Overrides = Annotated[list[str] | None, typer.Option("--set", help="Config override KEY=VALUE (repeatable).")]
RootOption = Annotated[Path | None, typer.Option("--root", help="Storage root (default: $COEVOLVE_HOME or runs).")]
LIBRARY_NOTICES = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)
"""Warning categories the libraries use for notices to their own users (an argument renamed in a future
version, ...): not shown without --verbose."""


def fail(message: str) -> None:
    """One paragraph on stderr, then exit 2 (bad input or state, never a traceback)."""
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def run_layout(root: Path | None, run: str):
    """The run's folder under the storage root; a name that cannot be one is one line, not a traceback."""
    from coevolve.storage.layout import RunLayout

    try:
        return RunLayout(root_of(root), run)
    except ValueError as exc:
        fail(str(exc))


def root_of(root: Path | None) -> Path:
    from coevolve.storage.layout import storage_root

    return storage_root(root)


def quiet_libraries() -> None:
    """Keep the terminal (and a log the output goes to) for our progress and summary lines: flow and task
    run logs (state changes, a failed stage's traceback) go to the Prefect API only, and the libraries'
    deprecation notices (a transformers `FutureWarning`, ...) are not shown, unless --verbose; the command
    itself reports errors, as one paragraph for bad input or state."""
    import logging
    import warnings

    from prefect.logging.configuration import ensure_logging_setup
    from transformers.utils import logging as hf_logging

    if os.environ.get("TRANSFORMERS_VERBOSITY") == "error":
        for category in LIBRARY_NOTICES:
            warnings.filterwarnings("ignore", category=category)
        hf_logging.disable_progress_bar()
        ensure_logging_setup()
        for name in ("prefect.flow_runs", "prefect.task_runs"):
            logging.getLogger(name).propagate = False


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean bad input or state (config, run, artifacts, Prefect API), shown as one paragraph."""
    from coevolve.config import ConfigError
    from coevolve.flows.prefect_api import PrefectApiError
    from coevolve.flows.runs import RunError
    from coevolve.storage.parquet import ArtifactError

    return ConfigError, RunError, ArtifactError, PrefectApiError


def require_prefect_api(command: str) -> None:
    from coevolve.flows.serve import api_problem

    problem = api_problem(required=command == "serve")
    if problem:
        fail(problem)
