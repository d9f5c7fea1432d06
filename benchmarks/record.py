"""Benchmark results as data: one JSON Lines file per benchmark under `benchmarks/results/`.

Every run of a benchmark appends one row to `benchmarks/results/<name>.jsonl`:

    {"benchmark": "signals", "variant": "", "date": "2026-11-30", "commit": "0b9d3d1",
     "machine": "2-core CPU, 24 GiB, no GPU", "command": "coevolve bench signals",
     "figures": {"extract_signals, tool pattern": {"value": 0.71, "unit": "s"}, ...}, "note": "..."}

`figures` are named numbers with units (and, for an estimate, its `interval`); `variant` tells apart the
measurements one benchmark makes with different inputs (e.g. `toolworld` and `bfcl` for zero-shot), and
the newest row of each (benchmark, variant) is its current figure (`coevolve bench report` tabulates
them into `benchmarks/RESULTS.md`). Rows are only ever appended: the file is the benchmark's history.

    record_result("signals", {"tool pattern": figure(0.71, "s")}, command=command_line("signals", argv))

`COEVOLVE_BENCH_RESULTS` names another folder (tests, scratch measurements).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
"""The committed results of this checkout."""
REPO = Path(__file__).resolve().parent.parent


def results_dir() -> Path:
    return Path(os.environ.get("COEVOLVE_BENCH_RESULTS") or RESULTS)


def figure(value: float, unit: str, interval: tuple[float, float] | None = None) -> dict:
    """One named number of a result row: its value, its unit (`s`, `%`, `points`, `tokens/s`, `x`, ...;
    empty for a count) and, for an estimate, its 95 % interval."""
    out = {"value": float(f"{value:.6g}"), "unit": unit}  # digits past the sixth are noise in a timing
    if interval is not None:
        out["interval"] = [float(f"{interval[0]:.6g}"), float(f"{interval[1]:.6g}")]
    return out


def command_line(name: str, argv: Sequence[str] | None) -> str:
    """The command that reruns benchmark `name` with these arguments (`sys.argv[1:]` when None, as under
    `python -m`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["coevolve bench", name, *(shlex.quote(a) for a in args)])


def machine() -> str:
    """`N-core CPU, M GiB` and the GPU torch sees (`no GPU` when torch is not loaded or sees none)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = "no GPU"
    torch = sys.modules.get("torch")  # asking a torch that was never imported would cost seconds
    if torch is not None and torch.cuda.is_available():
        gpu = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}"
    return f"{os.cpu_count()}-core CPU, {memory:.0f} GiB, {gpu}"


def current_commit() -> str:
    """The checkout's short commit, with `-dirty` when tracked files differ from it; `unknown` outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()  # fmt: skip

    try:
        commit = git("rev-parse", "--short", "HEAD")
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record_result(benchmark: str, figures: Mapping[str, dict], *, command: str, variant: str = "",
                  note: str = "", outputs: str = "", directory: Path | None = None,
                  extra: Mapping[str, object] | None = None, commit: str | None = None) -> dict:  # fmt: skip
    """Append one row to `<directory>/<benchmark>.jsonl` (default `results_dir()`) and return it; `extra`
    adds fields (`retired`: the commit and date of the figures a retirement row withdraws). `commit`: the
    checkout's as the benchmark started (default: now), for a benchmark that writes into the checkout.

    The append is atomic: under an exclusive lock on the folder, the file with the new row is written
    to a temporary name and renamed over the old one, so a reader or a killed writer never sees half a
    row, and two benchmarks finishing together both land."""
    for name, value in figures.items():
        if not (isinstance(value, dict) and isinstance(value.get("value"), int | float)
                and isinstance(value.get("unit"), str)):  # fmt: skip
            raise ValueError(f"figure {name!r} of {benchmark}: expected figure(value, unit), got {value!r}")
    row = {"benchmark": benchmark, "variant": variant, "date": datetime.date.today().isoformat(),
           "commit": commit or current_commit(), "machine": machine(), "command": command, "figures": dict(figures)}  # fmt: skip
    row |= {key: value for key, value in (("note", note), ("outputs", outputs)) if value}
    row |= dict(extra or {})
    append_row(row, (directory or results_dir()) / f"{benchmark}.jsonl")
    return row


def append_row(row: dict, path: Path) -> None:
    line = json.dumps(row, ensure_ascii=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = path.read_text() if path.exists() else ""
        if before and not before.endswith("\n"):
            before += "\n"
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with temporary.open("w") as out:
            out.write(before + line)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        os.close(lock)  # releases the lock


def read_results(directory: Path | None = None) -> dict[str, list[dict]]:
    """Every benchmark's rows, oldest first, by benchmark name (the file's stem)."""
    directory = directory or results_dir()
    out = {}
    for path in sorted(directory.glob("*.jsonl")):
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON row ({exc.msg})") from exc
        out[path.stem] = rows
    return out
