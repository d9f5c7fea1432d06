"""Shared fixtures: an isolated Prefect API for flow tests, paths of the shipped configs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from coevolve.processes import free_port

if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # `make test` runs the suite in several processes (pytest-xdist): each takes its share of the cores for
    # its math threads, and so do the processes its tests start (they inherit the variables); torch reads
    # them when first imported, after this file
    threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    os.environ.setdefault("MKL_NUM_THREADS", threads)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")  # INFO still reaches the API

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


@pytest.fixture(scope="session")
def prefect_api():
    """A temporary Prefect database and API for the whole session (real Prefect, no ~/.prefect)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def tiny_train_tasks() -> list:
    from coevolve import envs
    from coevolve.config import load_config

    cfg = load_config(CONFIGS / "test-tiny.yaml")
    return envs.make(cfg.env.name, **cfg.env.options).tasks("train")


def oracle_engines():
    """An engine factory (`open_run(..., engine_factory=...)`): every policy generates with the named fake
    `OracleEngine` (solves every other episode of a test-tiny training task; on any other task it calls the
    tools that need no argument and quotes the last result, which answers the scripted teacher's synthesized
    tasks: verification admits them); the tiny model is still the one trained."""
    from tests.fakes.teacher import OracleEngine

    train = tiny_train_tasks()
    return lambda policy: OracleEngine(policy.tokenizer, train, solve="alternate", explore_unknown=True,
                                       version=policy.version)


def scripted_teachers(ctx, policy_round: int):
    """A teacher factory (`open_run(..., teacher_factory=...)`): the scripted fake teacher."""
    from tests.fakes.teacher import ScriptedTeacher

    return ScriptedTeacher(ctx.use_policy(policy_round).tokenizer, ctx.env_tasks("train"))


def run_evolved(root: Path, run: str = "evo", rounds: int = 2) -> dict:
    """test-tiny.yaml with `evolve.every=1` in a Prefect flow through the real round loop
    (`flows.coevolve.run_context`), with the named fakes that make every evolution phase produce rows: an
    oracle policy engine that solves every other episode (boundary signals) and the scripted teacher (see
    tests/integration/test_evolution_tiny.py). Needs a Prefect API."""
    from prefect import flow

    from coevolve.config import load_config
    from coevolve.flows.coevolve import run_context
    from coevolve.flows.run_context import open_run

    @flow(name="coevolve-with-fakes")
    def evolve_with_fakes(root: str, run: str, rounds: int) -> dict:
        cfg = load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1"])
        ctx = open_run(cfg, run, Path(root), engine_factory=oracle_engines(), teacher_factory=scripted_teachers)
        return run_context(ctx, rounds=rounds)

    return evolve_with_fakes(str(root), run, rounds)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from coevolve.llm.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-random-llama"))


def fake_context(cfg, root, tokenizer, *, solve="alternate"):
    """A RunContext whose policy engine is an oracle and whose teacher is scripted (the tiny model is still
    the one loaded and trained). On a task it does not know (a synthesized one, at verification) the
    policy calls the tools that need no argument and quotes the last result, which answers the scripted
    teacher's tasks: verification admits them."""
    from coevolve.flows.run_context import open_run
    from tests.fakes.teacher import OracleEngine, ScriptedTeacher

    train = open_run(cfg, "evo", root).env_tasks("train")
    return open_run(
        cfg, "evo", root, quiet=True,
        engine_factory=lambda policy: OracleEngine(policy.tokenizer, train, solve=solve, explore_unknown=True,
                                                   version=policy.version),
        teacher_factory=lambda ctx, policy_round: ScriptedTeacher(tokenizer, train),
    )


@dataclass(frozen=True)
class EvolvedRun:
    root: Path
    run: str
    result: dict  # what the flow returned


@pytest.fixture(scope="session")
def evolved_run(tmp_path_factory, prefect_api) -> EvolvedRun:
    """One evolving tiny run (2 rounds, `run_evolved`), shared by the tests that only read it: the
    evolution checks, SQL docs, `coevolve show`/`runs`, Prefect artifacts, the notebook. Never write
    under its root (copy it first)."""
    root = tmp_path_factory.mktemp("evolved")
    return EvolvedRun(root, "evo", run_evolved(root, "evo"))


# --- processes started by tests: each in its own process group, killed only through that group ------


@dataclass
class Spawned:
    """A subprocess in its own session (process group) with its output in a file."""

    proc: subprocess.Popen
    log: Path

    @classmethod
    def start(cls, args: list[str], log: Path, env: dict[str, str], cwd: Path = REPO) -> Spawned:
        handle = open(log, "wb")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        handle.close()
        return cls(proc, log)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 20) -> None:
        """Signal the whole group this test started (never anything by name), then reap it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError):  # children that outlived the leader
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.proc.args} still running after {timeout} s:\n{self.output()[-3000:]}") from None


def wait_until(predicate, timeout: float, what: str, *, watch: Spawned | None = None, every: float = 0.05):
    """Poll `predicate` until true; fail after `timeout` s, or as soon as `watch` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if watch is not None and watch.proc.poll() is not None and not predicate():
            raise AssertionError(f"{what}: process exited with {watch.proc.returncode}:\n{watch.output()[-3000:]}")
        time.sleep(every)
    raise AssertionError(f"{what}: not after {timeout} s" + (f":\n{watch.output()[-3000:]}" if watch else ""))


def venv_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """A real `prefect server start` on a free loopback port, its own PREFECT_HOME, analytics off.
    Yields the API URL; the server's process group is terminated at the end of the session."""
    import httpx

    home = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    server = Spawned.start([venv_bin("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                           home / "server.log", env)
    url = f"http://127.0.0.1:{port}/api"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 120, "prefect server health", watch=server, every=0.5)
        yield url
    finally:
        server.kill(signal.SIGTERM)
