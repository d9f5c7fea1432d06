"""`check_environment(name)`: is an environment usable here; if not, exactly what is missing and the fix.

    from flows.env_check import check_environment, ready
    findings = check_environment("appworld")            # or "toolworld", "bfcl"; options as for envs.make
    print("\\n".join(findings)); ok = ready(findings)

Each finding is one line starting with `ok:`, `missing:` (something to fix) or `note:`; a line starting with
`  run:` is a command that fixes what the lines above it report. `ready(findings)` is False when any
line is `missing:`. The CLI (`coevolve env check NAME`) prints the lines and exits non-zero unless ready.

For AppWorld the server's URL is the option `base_url`, else $APPWORLD_URL, else http://127.0.0.1:8000.
For OpenEnv (`env.name: openenv`) the options name the environment (`environment` or `url`), so it is
checked with a config's: `coevolve env check --config my-config.yaml`; `listing(name)` is the line
`coevolve env list` shows for an adapter that needs them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coevolve.envs.appworld.client import (
    APPWORLD_VENV,
    DEFAULT_URL,
    SETUP_COMMAND,
    AppWorldError,
    port_of,
    serve_command,
)
from coevolve.envs.appworld.tasks import data_root
from coevolve.envs.openenv.sessions import EXTRA_MODULES, check_server, load_attribute

BFCL_PIN = "2026.3.23"
OPENENV_INSTALL = ".venv/bin/pip install -e '.[openenv]'"
OPENENV_EXAMPLES = ("coevolve.envs.openenv.example_inventory:InventoryEnvironment",
                    "coevolve.envs.openenv.toolworld_server:ToolWorldOpenEnv")  # fmt: skip
"""The OpenEnv environments shipped with the adapter (docs/openenv.md)."""
OK, MISSING, NOTE, RUN = "ok: ", "missing: ", "note: ", "  run: "


def check_environment(name: str, options: dict[str, Any] | None = None) -> list[str]:
    """Human-readable findings about environment `name` built with `options` (see the module docstring)."""
    from coevolve import envs

    if name not in envs.available():
        return [f"{MISSING}unknown environment {name!r}; available: {', '.join(envs.available())}"]
    check = _CHECKS.get(name, _check_generic)
    return check(name, dict(options or {}))


def ready(findings: list[str]) -> bool:
    """True when no finding reports something missing."""
    return not any(line.startswith(MISSING) for line in findings)


def listing(name: str) -> str | None:
    """The `coevolve env list` line of an adapter whose environment its options name (None for the others):
    what it adapts, or that its extra is missing."""
    if name != "openenv":
        return None
    missing = _missing_modules(EXTRA_MODULES)
    if missing:
        return (f"openenv: not available (the openenv extra is not installed: no module {missing[0]!r}); "
                f"run {OPENENV_INSTALL}")  # fmt: skip
    return (f"openenv: adapter for OpenEnv environments, named by env.options.environment or url (docs/openenv.md); "
            f"shipped: {', '.join(OPENENV_EXAMPLES)}")  # fmt: skip


def _missing_modules(names: tuple[str, ...]) -> list[str]:
    """The modules of `names` that cannot be imported here (found without importing them)."""
    missing = []
    for module in names:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a module set to None or without a spec: not importable
            found = False
        if not found:
            missing.append(module)
    return missing


def _counts(env: Any, splits: list[str] | None = None) -> str:
    return ", ".join(f"{split} {len(env.tasks(split))}" for split in splits or env.splits())


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _check_generic(name: str, options: dict[str, Any]) -> list[str]:
    from coevolve import envs

    try:
        env = envs.make(name, **options)
        return [f"{OK}{name}: tasks {_counts(env)}"]
    except Exception as exc:  # a report, not a crash: say what failed
        return [f"{MISSING}{name} cannot load its tasks: {type(exc).__name__}: {exc}"]


def _check_toolworld(name: str, options: dict[str, Any]) -> list[str]:
    from coevolve import envs

    env = envs.make(name, **options)
    version = _version("coevolve") or "source tree"
    return [f"{OK}toolworld (built in, coevolve {version}, seed {env.seed}): tasks {_counts(env)}"]


def _check_bfcl(name: str, options: dict[str, Any]) -> list[str]:
    from coevolve import envs

    version = _version("bfcl-eval")
    if version is None:
        return [
            f"{MISSING}bfcl-eval is not installed (BFCL's tasks, tool docs and backends come from it)",
            f"{RUN}.venv/bin/pip install --no-deps bfcl-eval=={BFCL_PIN} mpmath",
        ]
    findings = []
    if version != BFCL_PIN:
        findings.append(
            f"{NOTE}bfcl-eval {version} is installed, the project pins {BFCL_PIN}: task sets and answers "
            "differ between versions, so numbers are comparable only at the same version"
        )
    try:
        env = envs.make(name, **options)
        findings.append(f"{OK}bfcl (bfcl-eval {version}, {env.category}): tasks {_counts(env)}")
    except Exception as exc:  # a broken install is a finding, not a crash
        findings.append(f"{MISSING}bfcl-eval {version} is installed but its data does not load: {exc}")
        findings.append(f"{RUN}.venv/bin/pip install --no-deps --force-reinstall bfcl-eval=={BFCL_PIN}")
    return findings


def _check_appworld(name: str, options: dict[str, Any]) -> list[str]:
    """Server reachable? Task ids found? The server loads a task? Each missing piece with its fix."""
    from coevolve import envs

    options["base_url"] = options.get("base_url") or os.environ.get("APPWORLD_URL") or DEFAULT_URL
    env = envs.make(name, **options)
    server = _appworld_server(env.client)
    findings = [server]
    if server.startswith(MISSING):
        findings += _appworld_setup(env.client.base_url)
    ids, id_findings = _appworld_ids(env, data_root(options.get("data_root")))
    findings += id_findings
    first = next((found[0] for found in ids.values() if found), None)
    if first and server.startswith(OK):
        findings.append(_appworld_task_loads(env.client, first))
    findings.append(f"{NOTE}one AppWorld server holds one world: one server (port) per concurrent episode")
    return findings


def _appworld_setup(url: str) -> list[str]:
    """How to get a server running: the venv (if there is none here), then the serve command."""
    findings = []
    if not Path(APPWORLD_VENV, "bin", "appworld").is_file():
        findings += [
            f"{MISSING}no AppWorld venv at ./{APPWORLD_VENV} (AppWorld's pins clash with ours, so it gets "
            "a venv of its own; `appworld download data` needs internet)",
            f"{RUN}{SETUP_COMMAND}",
        ]
    findings.append(f"{NOTE}then start the server from the folder holding AppWorld's data/:")
    findings.append(f"{RUN}{serve_command(port_of(url))}")
    return findings


def _appworld_ids(env: Any, root: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Task ids per split that can be found here, and what is missing if none can."""
    ids, absent, broken = {}, [], []
    for split in env.splits():
        try:
            ids[split] = env.task_ids(split)
        except AppWorldError:
            absent.append(split)
        except (ValueError, OSError) as exc:  # a malformed or unreadable id file
            broken.append(f"{MISSING}task ids of split {split}: {exc}")
    datasets = root.absolute() / "data" / "datasets"
    if ids:
        counts = ", ".join(f"{split} {len(found)}" for split, found in ids.items())
        found = [f"{OK}AppWorld task ids (split_tasks or {datasets}): {counts}"]
        return ids, found + broken + ([f"{NOTE}no task ids for {', '.join(absent)}"] if absent else [])
    return ids, broken + [
        f"{MISSING}no AppWorld task ids: {datasets} does not exist (AppWorld's server cannot list splits)",
        f"{RUN}cd {root.absolute()} && {APPWORLD_VENV}/bin/appworld download data",
        f"{NOTE}or point $APPWORLD_ROOT or the env option data_root at the folder holding data/, or pass "
        "the env option split_tasks",
    ]


def _appworld_server(client: Any) -> str:
    try:
        answer = client.request("GET", "/")
    except AppWorldError as exc:
        return f"{MISSING}AppWorld server not reachable at {client.base_url} ({exc.reason})"
    if "AppWorld" not in str(answer.get("message", "")):
        return f"{MISSING}{client.base_url} answers, but not as AppWorld's server: {str(answer)[:120]}"
    return f"{OK}AppWorld server answers at {client.base_url}"


def _appworld_task_loads(client: Any, task_id: str) -> str:
    try:
        client.get(f"/tasks/{task_id}")
    except AppWorldError as exc:
        return (
            f"{MISSING}the server cannot load task {task_id} ({exc.reason}): start it from the folder "
            "where `appworld download data` ran"
        )
    return f"{OK}the server loads task {task_id}"


def _check_openenv(name: str, options: dict[str, Any]) -> list[str]:
    """The extra, the environment's import path or server, its tasks: one line each for what is missing."""
    missing = _missing_modules(EXTRA_MODULES)
    if missing:
        return [f"{MISSING}the openenv extra is not installed (no module {missing[0]!r})", f"{RUN}{OPENENV_INSTALL}"]
    if not options.get("environment") and not options.get("url"):
        return [f"{MISSING}no OpenEnv environment named: set env.options.environment (an import path) or "
                "env.options.url (its server) in a config, then `coevolve env check --config CONFIG`"]  # fmt: skip
    findings = []
    for option, check, found in (("environment", load_attribute, "imports"),
                                 ("url", check_server, "answers as an OpenEnv server")):  # fmt: skip
        if not options.get(option):
            continue
        try:
            check(str(options[option]))
        except ValueError as exc:
            return [*findings, f"{MISSING}env.options.{option}: {exc}"]
        findings.append(f"{OK}env.options.{option} {options[option]} {found}")
    return findings + _check_generic(name, options)


_CHECKS: dict[str, Callable[[str, dict[str, Any]], list[str]]] = {
    "toolworld": _check_toolworld,
    "bfcl": _check_bfcl,
    "appworld": _check_appworld,
    "openenv": _check_openenv,
}
