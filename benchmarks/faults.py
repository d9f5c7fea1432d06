"""The fault-injection suite as a benchmark: how many faults were injected into real runs and how many the
runs survived (completed afterwards with the rows, and weights, of an uninterrupted run).

    coevolve bench faults                      # from a checkout: runs tests/integration/test_faults.py

Each test of `tests/integration/test_faults.py` injects one fault into `coevolve run` processes: SIGKILL
after a stage's manifest or in the middle of a stage's writes (Parquet, manifest, checkpoint), a second
writer on the same run, corrupt Parquet and manifest files, a full disk, SIGKILL of the process holding
the temporary Prefect server. A fault is survived when its test passes. The counts per kind and the wall
time are recorded; the suite's own assertions say what surviving means.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser

SUITE = Path("tests/integration/test_faults.py")


def kind_of(test_name: str) -> str:
    """`kill` for the parametrised kills, else the test's name without its `test_` prefix."""
    return "kill" if "[" in test_name else test_name.removeprefix("test_")


def counts(report: Path) -> tuple[Counter, Counter]:
    """(injected, survived) per kind, from a JUnit XML report."""
    injected, survived = Counter(), Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        kind = kind_of(case.get("name", ""))
        injected[kind] += 1
        if case.find("failure") is None and case.find("error") is None:
            survived[kind] += 1
    return injected, survived


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("faults", __doc__)
    parser.add_argument("--repo", type=Path, default=Path("."), help="The checkout holding tests/ (default: .).")
    args = parser.parse_args(argv)
    suite = args.repo / SUITE
    if not suite.is_file():
        parser.exit(2, f"error: {suite} not found: run `coevolve bench faults` in a checkout of the project\n")
    report = Path(tempfile.mkdtemp(prefix="coevolve-faults-")) / "faults.xml"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SUITE),
                    f"--junitxml={report}"], cwd=args.repo)  # fmt: skip
    seconds = time.perf_counter() - started
    injected, survived = counts(report)
    for kind in sorted(injected):
        print(f"{kind}: {survived[kind]}/{injected[kind]} survived")
    figures = {"faults injected": figure(sum(injected.values()), ""),
               "faults survived": figure(sum(survived.values()), ""), "wall": figure(seconds, "s")}  # fmt: skip
    figures |= {f"{kind}: survived of injected": figure(survived[kind] / injected[kind], "") for kind in injected}
    record_result("faults", figures, command=command_line("faults", argv),
                  note="each fault is one test of tests/integration/test_faults.py; survived = the test passed")
