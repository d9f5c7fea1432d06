"""Fault injection: `coevolve run` killed with SIGKILL at stage boundaries and in the middle of stages' writes
(Parquet, manifests, the checkpoint), two writers at once, corrupt files, a full disk. After each fault the
same command completes, with no row lost or duplicated and the same rows (and weights) as an uninterrupted
run. The kills come from tests/fault_injection/sitecustomize.py in the child process only.

`coevolve bench faults` runs this module and records how many faults were injected and survived.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CONFIGS, REPO

pytestmark = pytest.mark.slow

COMMAND = ["run", str(CONFIGS / "test-tiny.yaml"), "--rounds", "1", "--run", "faults"]
KILLS = [
    ("after", "stage=bootstrap/_manifest.json", 1),
    ("after", "stage=baseline/_manifest.json", 1),
    ("after", "stage=rollout/_manifest.json", 1),
    ("after", "stage=grpo_update/_manifest.json", 1),
    ("after", "stage=evaluate/_manifest.json", 1),
    ("before", "stage=rollout/samples.parquet", 1),
    ("before", "stage=evaluate/trajectories.parquet", 1),
    ("before", "checkpoints/round=0", 1),
    ("before", "stage=grpo_update/_manifest.json", 1),
    ("after", "config.yaml", 1),
]
"""(when, where, n): kill before or after the n-th rename onto a path containing `where`."""


def coevolve(root: Path, api: str, *, kill: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": api, "PYTHONPATH": str(REPO / "tests" / "fault_injection")}
    env.pop("COEVOLVE_TEST_KILL", None)
    if kill:
        env["COEVOLVE_TEST_KILL"] = kill
    command = [str(Path(sys.executable).with_name("coevolve")), *COMMAND, "--root", str(root)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def rows_of(root: Path) -> dict[str, list[tuple]]:
    """Every artifact's rows (timings left out), sorted: what two runs must agree on."""
    from coevolve.storage.catalog import ArtifactFiles, query

    out = {}
    for name in ArtifactFiles.scan(root).readable:
        exclude = " EXCLUDE (seconds, checkpoint)" if name == "updates" else ""  # a timing, a path
        table = query(root, f"SELECT *{exclude} FROM {name}")
        out[name] = sorted(tuple(str(v) for v in row.values()) for row in table.to_pylist())
    return out


def weights_of(root: Path) -> bytes:
    return (root / "run=faults" / "checkpoints" / "round=0" / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, prefect_server):
    root = tmp_path_factory.mktemp("reference")
    done = coevolve(root, prefect_server)
    assert done.returncode == 0, done.stderr
    return root, rows_of(root), weights_of(root)


@pytest.mark.parametrize("kill", [f"{w}:{p}:{n}" for w, p, n in KILLS])
def test_a_run_killed_anywhere_completes_with_the_same_rows(tmp_path, prefect_server, reference, kill):
    _, rows, weights = reference
    killed = coevolve(tmp_path, prefect_server, kill=kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = coevolve(tmp_path, prefect_server)
    assert again.returncode == 0, again.stderr
    assert rows_of(tmp_path) == rows  # none lost, none duplicated, the same values
    assert weights_of(tmp_path) == weights
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]
    assert not leftovers


def test_two_writers_one_completes_the_other_names_it(tmp_path, prefect_server, reference):
    env = {**os.environ, "PREFECT_API_URL": prefect_server}
    command = [str(Path(sys.executable).with_name("coevolve")), *COMMAND, "--root", str(tmp_path)]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run=faults" / ".lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the lock is taken once the flow starts
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert second.returncode == 2 and "is being written by process" in second.stderr, second.stderr
    assert rows_of(tmp_path) == reference[1]


def test_corrupt_parquet_and_manifest_are_recomputed(tmp_path, prefect_server, reference):
    root, rows, _ = reference
    shutil.copytree(root / "run=faults", tmp_path / "run=faults")
    stage = tmp_path / "run=faults" / "round=0"
    samples = stage / "stage=rollout" / "samples.parquet"
    samples.write_bytes(samples.read_bytes()[:200])
    (stage / "stage=evaluate" / "_manifest.json").write_text("{not json")
    again = coevolve(tmp_path, prefect_server)
    assert again.returncode == 0, again.stderr
    assert rows_of(tmp_path) == rows


def test_a_full_disk_stops_with_one_paragraph_and_the_run_then_completes(tmp_path, prefect_server, reference):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12M", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        full = coevolve(small, prefect_server)
        assert full.returncode == 2, full.stderr
        assert "no space left on the device" in full.stderr and "Traceback" not in full.stderr
        kept = [p.parent.name for p in small.rglob("_manifest.json")]
        assert "stage=bootstrap" in kept  # what completed before the disk filled stays
        shutil.copytree(small, tmp_path / "big", dirs_exist_ok=True)
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)
    again = coevolve(tmp_path / "big", prefect_server)
    assert again.returncode == 0, again.stderr
    assert rows_of(tmp_path / "big") == reference[1]


def test_killing_the_run_leaves_no_prefect_server_behind(tmp_path):
    """Without PREFECT_API_URL the run starts a temporary server; SIGKILL of the run ends it too."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    command = [str(Path(sys.executable).with_name("coevolve")), *COMMAND, "--root", str(tmp_path / "runs")]
    run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)  # fmt: skip
    server = None
    deadline = time.monotonic() + 180
    while server is None and time.monotonic() < deadline:
        server = next((p for p in _children(run.pid) if "uvicorn" in _cmdline(p)), None)
        time.sleep(0.2)
    assert server is not None, "the temporary server never started"
    run.send_signal(signal.SIGKILL)
    run.wait(30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{server}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = Path(f"/proc/{server}").exists() and "Z" not in _state(server)
    if alive:
        os.kill(server, signal.SIGKILL)
    assert not alive, "the temporary Prefect server outlived the run"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "gone"
