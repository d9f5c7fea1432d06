"""Fault injection: `coevolve run` killed with SIGKILL at stage boundaries and in the middle of stages' writes
(Parquet, manifests, the checkpoints), two writers at once, corrupt files, a full disk, a checkpoint replaced
by other valid weights or with one byte flipped (its mtime put back), an update that diverges. After each
fault the same command completes, with no row lost or duplicated and the same rows and weights as an
uninterrupted run (or, for the divergence, stops with one paragraph first). The kills come from
tests/fault_injection/sitecustomize.py in the child process only.

The runs are test-tiny's, 2 rounds, with AdamW weight decay (`MOVING`). In test-tiny the tiny random model
earns the same reward on every sample, every advantage is 0 and an update without decay changes no weight, so
"the same weights" would hold whichever weights a resumed run loaded. Decoupled decay moves every weight in
every update, and from round 1 on the KL term to the reference gives real gradients (and the optimizer
state carried from round 0 changes round 1's step): round 1's weights depend on the weights and optimizer
state it starts from. `test_premise_the_updates_move_every_weight` checks that this still holds.

`coevolve bench faults` runs this module and records how many faults were injected and survived.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CONFIGS, REPO

pytestmark = pytest.mark.slow

TINY = "tiny-random-llama"
MOVING = "train.weight_decay=0.1"
"""Makes test-tiny's updates move the weights (see the module docstring)."""
COMMAND = ["run", str(CONFIGS / "test-tiny.yaml"), "--rounds", "2", "--run", "faults", "--set", MOVING]
KILLS = [
    ("after", "config.yaml", 0),
    ("after", "stage=bootstrap/_manifest.json", 1),
    ("after", "stage=baseline/_manifest.json", 2),
    ("before", "stage=rollout/samples.parquet", 2),
    ("after", "stage=rollout/_manifest.json", 3),
    ("before", "checkpoints/round=0", 3),
    ("before", "stage=grpo_update/_manifest.json", 3),
    ("after", "stage=grpo_update/_manifest.json", 4),
    ("before", "stage=evaluate/trajectories.parquet", 4),
    ("after", "stage=evaluate/_manifest.json", 5),
    ("before", "checkpoints/round=1", 6),
    ("before", "round=1/stage=grpo_update/_manifest.json", 6),
    ("after", "round=1/stage=grpo_update/_manifest.json", 7),
]
"""(when, where, stages done): in the order a run reaches them, kill the process before or after its first
atomic rename onto a path containing `where` (a stage boundary after a manifest; the middle of a stage's
writes before a Parquet file, a checkpoint or a manifest), which leaves `stages done` stage manifests of the
run on disk. test-tiny's 2 rounds write 8: bootstrap, baseline, rollout, grpo_update and evaluate in round
0, rollout, grpo_update and evaluate in round 1."""


def coevolve(root: Path, api: str, *overrides: str, kill: str | None = None,
             timeout: float = 600) -> subprocess.CompletedProcess:  # fmt: skip
    """`COMMAND` in `root`, with `--set` of each override, killed as `kill` says (see `KILLS`)."""
    env = {**os.environ, "PREFECT_API_URL": api, "PYTHONPATH": str(REPO / "tests" / "fault_injection")}
    env.pop("COEVOLVE_TEST_KILL", None)
    if kill:
        env["COEVOLVE_TEST_KILL"] = kill
    sets = [arg for override in overrides for arg in ("--set", override)]
    command = [str(Path(sys.executable).with_name("coevolve")), *COMMAND, *sets, "--root", str(root)]
    return run_in_own_group(command, env, timeout)


def run_in_own_group(command: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`subprocess.run` in a new process group, the whole group killed at `timeout`: a child of the run
    holding its pipes open can then not keep the test waiting for their end."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"`coevolve {' '.join(command[1:])}` ran past {timeout:.0f} s; its stderr: {err[-2000:]}")
    if process.returncode == -signal.SIGKILL:  # a killed run's children, if any, go with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def rows_of(root: Path) -> dict[str, list[tuple]]:
    """Every artifact's rows (timings left out), sorted: what two runs must agree on."""
    from coevolve.storage.catalog import ArtifactFiles, query

    out = {}
    for name in ArtifactFiles.scan(root).readable:
        exclude = " EXCLUDE (seconds, checkpoint)" if name == "updates" else ""  # a timing, a path
        table = query(root, f"SELECT *{exclude} FROM {name}")
        out[name] = sorted(tuple(str(v) for v in row.values()) for row in table.to_pylist())
    return out


def weights_file(root: Path, round_: int) -> Path:
    return root / "run=faults" / "checkpoints" / f"round={round_}" / "model.safetensors"


def weights_of(root: Path) -> tuple[bytes, bytes]:
    """Both rounds' weights (`train.keep_checkpoints` 2 keeps both)."""
    return weights_file(root, 0).read_bytes(), weights_file(root, 1).read_bytes()


def overwrite_keeping_mtime(path: Path, data: bytes) -> None:
    """Write `data` over `path` in place, then put its access and modification times back."""
    before = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def assert_completed_as(reference, root: Path, done: subprocess.CompletedProcess) -> None:
    """`done` exited 0 and left in `root` the rows and weights of the uninterrupted run."""
    assert done.returncode == 0, done.stderr
    assert rows_of(root) == reference[1]  # none lost, none duplicated, the same values
    assert weights_of(root) == reference[2]


def recomputed(stage: str, round_: int, done: subprocess.CompletedProcess) -> bool:
    """Whether the run computed the stage (its progress line does not end in `(cached)`)."""
    return re.search(rf"^round {round_} {stage}: done in [\d.]+ s$", done.stdout, re.M) is not None


@pytest.fixture(scope="module")
def reference(tmp_path_factory, prefect_server):
    root = tmp_path_factory.mktemp("reference")
    done = coevolve(root, prefect_server)
    assert done.returncode == 0, done.stderr
    return root, rows_of(root), weights_of(root)


def test_a_run_killed_at_every_kill_point_in_turn_completes_with_the_same_rows(
    tmp_path, prefect_server, reference, record_property
):
    """One run killed at each of `KILLS` in turn: every process that continues it is killed at the next
    point, and the last one completes. Each kill must land where it says (the stages before it done, none
    after), and the run must end with the uninterrupted run's rows and weights and no temporary file left.
    A resume that loses or duplicates rows, trusts a half-written file or loads the wrong weights leaves its
    mark on what the next processes build on, and the final comparison finds it; a kill point the run no
    longer reaches fails where it should have fired. The points share one run instead of one run each: 14
    processes instead of 26, the same kills."""
    record_property("faults", len(KILLS))  # `coevolve bench faults` counts each kill
    for when, where, done in KILLS:
        killed = coevolve(tmp_path, prefect_server, kill=f"{when}:{where}:1")
        assert killed.returncode == -signal.SIGKILL, f"{when} {where}: not killed\n{killed.stderr[-2000:]}"
        assert stages_done(tmp_path) == done, f"killed {when} {where}"
    assert_completed_as(reference, tmp_path, coevolve(tmp_path, prefect_server))
    leftovers = [p for p in tmp_path.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]
    assert not leftovers


def stages_done(root: Path) -> int:
    return sum(1 for _ in (root / "run=faults").glob("round=*/stage=*/_manifest.json"))


def test_premise_the_updates_move_every_weight(reference):
    """What the weight checks of this suite rely on (no fault injected): each round's update changes every
    weight tensor, round 0's from the base model's and round 1's from round 0's. Without it "the same weights
    as an uninterrupted run" holds whatever weights a resumed run loads, so a change that stops the movement
    (of test-tiny, `MOVING`, the optimizer or the update) fails here first."""
    import torch
    from safetensors.torch import load_file

    from coevolve.llm.models import resolve_model

    root = reference[0]
    paths = [resolve_model(TINY) / "model.safetensors", weights_file(root, 0), weights_file(root, 1)]
    states = [load_file(path) for path in paths]
    for before, after in zip(states, states[1:], strict=False):
        assert before.keys() == after.keys()
        assert not [name for name in after if torch.equal(before[name], after[name])], "a weight did not move"


def test_a_checkpoint_holding_other_weights_is_not_trained_on(tmp_path, prefect_server, reference):
    """A copy of the finished run whose round 0 checkpoint then holds the base model's weights (a valid file
    of the same size, its mtime put back). The continued run recomputes round 0's update, and round 1's after
    it, and ends with the uninterrupted run's rows and weights. Catches a resume that trusts a checkpoint by
    its name, size or mtime: the run would keep the base model's weights as round 0's, and a run continued
    from them would train on them."""
    from coevolve.llm.models import resolve_model

    shutil.copytree(reference[0] / "run=faults", tmp_path / "run=faults")
    base = (resolve_model(TINY) / "model.safetensors").read_bytes()
    overwrite_keeping_mtime(weights_file(tmp_path, 0), base)
    again = coevolve(tmp_path, prefect_server)
    assert recomputed("grpo_update", 0, again), again.stdout
    assert_completed_as(reference, tmp_path, again)


@pytest.mark.parametrize("round_", [0, 1])
def test_a_byte_flipped_in_a_checkpoint_with_its_mtime_put_back_is_found_by_its_hash(
    tmp_path, prefect_server, reference, round_
):
    """A copy of the finished run with one byte of a round's weights flipped in place (size and mtime
    unchanged): the continued run finds it by its sha256, recomputes that round's update and ends with the
    uninterrupted run's weights. Catches a cache check that trusts size and mtime: the run would keep the
    flipped weights, and a run continued from them would train on them."""
    root = reference[0]
    shutil.copytree(root / "run=faults", tmp_path / "run=faults")
    data = bytearray(weights_file(tmp_path, round_).read_bytes())
    data[-1] ^= 0xFF  # sign and high exponent bits of the last weight
    overwrite_keeping_mtime(weights_file(tmp_path, round_), bytes(data))
    again = coevolve(tmp_path, prefect_server)
    assert recomputed("grpo_update", round_, again), again.stdout
    assert_completed_as(reference, tmp_path, again)


def test_a_diverged_update_stops_with_one_paragraph_and_continues_after_the_config_changes(
    tmp_path, prefect_server, reference
):
    """`model.dtype=float16`: AdamW's eps (1e-8) is 0 in float16, so its first step gives each weight whose
    gradient is 0 the value 0/0 = NaN (train.lr is bounded to 1, and no value up to it diverges test-tiny in
    float32). The run stops in round 0's update with one paragraph and nothing of that update on disk; with
    float32 set again it completes with the uninterrupted run's rows and weights. Catches NaN weights saved
    and trained on (the run would go on and exit 0), a traceback instead of the paragraph, and a half-saved
    update that the continued run would take as done."""
    diverged = coevolve(tmp_path, prefect_server, "model.dtype=float16")
    assert diverged.returncode == 2, diverged.stderr
    message = diverged.stderr.strip()
    assert message.startswith("error: round 0 of run 'faults': the GRPO update diverged"), message
    assert "Nothing of this update was saved" in message and "\n" not in message
    assert "--set model.dtype=float32" in message and "train.lr" not in message
    run = tmp_path / "run=faults"
    assert not (run / "round=0" / "stage=grpo_update").exists() and not (run / "checkpoints").exists()
    again = coevolve(tmp_path, prefect_server, "model.dtype=float32")
    assert_completed_as(reference, tmp_path, again)


def test_two_writers_one_completes_the_other_names_it(tmp_path, prefect_server, reference):
    env = {**os.environ, "PREFECT_API_URL": prefect_server}
    command = [str(Path(sys.executable).with_name("coevolve")), *COMMAND, "--root", str(tmp_path)]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run=faults" / ".lock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the lock is taken once the flow starts
    second = run_in_own_group(command, env, 600)
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
