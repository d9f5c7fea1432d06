"""Fault injection at the checkpoint writes: a disk that fills up at round 1's optimizer state, and a
file-size limit (`ulimit -f`) at round 0's weights. Each stops `coevolve run` with one paragraph naming the
file and the space it needs (no traceback, exit 2); once there is space (the tmpfs grown, the limit lifted)
the same command completes with the rows and weights of an uninterrupted run.

The runs are test_faults.py's (test-tiny, 2 rounds, updates that move the weights), whose checkpoints are
about 42 MB each: model.safetensors 12.9 MB, tokenizer 3.5 MB, optimizer.pt 25.8 MB; round 0's Parquet
files about 120 kB. A 70 MB disk holds round 0's checkpoint and round 1's weights but not round 1's
optimizer state; a 10 MB limit holds every Parquet file but not a weights file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.test_faults import COMMAND, coevolve, rows_of, run_in_own_group, weights_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory, prefect_server):
    root = tmp_path_factory.mktemp("reference")
    done = coevolve(root, prefect_server)
    assert done.returncode == 0, done.stderr
    return rows_of(root), weights_of(root)


def assert_one_paragraph_naming(done: subprocess.CompletedProcess, path: Path, needs: str) -> None:
    """`done` stopped with exit 2 and one line of error naming `path` and the bytes it needed, no traceback."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert str(path) in errors[0] and re.search(needs, errors[0]), errors[0]


def test_a_disk_full_at_the_optimizer_state_names_it_and_the_run_then_completes(tmp_path, prefect_server,
                                                                                reference):  # fmt: skip
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=70M", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        full = coevolve(small, prefect_server)
        optimizer = small / "run=faults" / "checkpoints" / "round=1" / "optimizer.pt"
        assert_one_paragraph_naming(full, optimizer, r"no space left on the device holding .*it needs about 25\.8 MB")
        assert not optimizer.parent.exists()  # the half-written checkpoint is gone, round 0's stays
        assert (small / "run=faults" / "checkpoints" / "round=0" / "optimizer.pt").is_file()
        grown = subprocess.run(["mount", "-o", "remount,size=400M", str(small)], capture_output=True)
        assert grown.returncode == 0, grown.stderr
        again = coevolve(small, prefect_server)
        assert again.returncode == 0, again.stderr
        assert rows_of(small) == reference[0]
        assert weights_of(small) == reference[1]
    finally:
        subprocess.run(["umount", str(small)], capture_output=True)


def test_a_file_size_limit_at_the_weights_names_them_and_the_run_then_completes(tmp_path, prefect_server,
                                                                                  reference):  # fmt: skip
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "PYTHONPATH": str(REPO / "tests" / "fault_injection")}
    env.pop("COEVOLVE_TEST_KILL", None)
    command = [str(Path(sys.executable).with_name("coevolve")), *COMMAND, "--root", str(tmp_path)]
    limited = run_in_own_group(["bash", "-c", 'ulimit -f 10000 && exec "$@"', "bash", *command], env, 600)
    weights = tmp_path / "run=faults" / "checkpoints" / "round=0" / "model.safetensors"
    assert_one_paragraph_naming(limited, weights, r"file-size limit of this process \(10\.2 MB, `ulimit -f`\)")
    again = coevolve(tmp_path, prefect_server)
    assert again.returncode == 0, again.stderr
    assert rows_of(tmp_path) == reference[0]
    assert weights_of(tmp_path) == reference[1]
