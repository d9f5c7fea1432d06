"""The fault-injection suite as a benchmark: how many faults were injected into real runs and how many the
runs survived (completed afterwards with the rows, and weights, of an uninterrupted run).

    coevolve bench faults                      # from a checkout: runs tests/integration/test_faults*.py

The suite is every file `tests/integration/test_faults*.py` (`suite_files`): `test_faults.py` and the
files beside it that attack one surface each (a proxy, a full disk, a planted symlink, ...); a file added
later is run and counted with the others, and the number of files is recorded. Each test injects one fault
into `coevolve` processes (most: 2 rounds of test-tiny whose updates move every weight), or as many as its
`faults` property says (one run killed at each kill point in turn): SIGKILL after a stage's manifest or in
the middle of a stage's writes (Parquet, manifests, checkpoints) in either round, a second writer on the
same run, corrupt Parquet and manifest files, a full disk, a checkpoint holding other valid weights (the
base model's), a byte flipped in a checkpoint with its mtime put back, an update that diverges, SIGKILL of
the process holding the temporary Prefect server, and what the other files add. A fault is survived when
its test passes; the faults of a test marked as a known failure (xfail) count as injected and not
survived. The counts per kind and the wall time are recorded; the suite's own assertions say what
surviving means.

Tests named `test_premise_*` inject nothing: they check what the others rely on (that the updates move
the weights, without which "the same weights" proves nothing). They are not counted; one that fails is
printed and recorded as `premises failed`, and the counts above it mean little.
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

SUITE = "tests/integration/test_faults*.py"
"""The fault suite's files, relative to the checkout (a glob)."""


def suite_files(repo: Path) -> list[Path]:
    """The fault suite's files in the checkout `repo`, relative to it, sorted."""
    return sorted(path.relative_to(repo) for path in repo.glob(SUITE) if path.is_file())


PREMISE = "test_premise_"
KILLS = "test_a_run_killed_at_every_kill_point_in_turn_completes_with_the_same_rows"


def kind_of(test_name: str) -> str | None:
    """`kill` for the kills, None for a premise (no fault), else the test's name without its
    parameters and its `test_` prefix."""
    name = test_name.partition("[")[0]
    if name.startswith(PREMISE):
        return None
    return "kill" if name == KILLS else name.removeprefix("test_")


def counts(report: Path) -> tuple[Counter, Counter, list[str]]:
    """(injected, survived) per kind and the premises that failed, from a JUnit XML report. A test injects
    one fault, or the number its `faults` property records; a skipped test injected nothing; an xfail
    (`<skipped type="pytest.xfail">`) injected its faults and survived none."""
    injected, survived, premises_failed = Counter(), Counter(), []
    for case in ET.parse(report).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None and skipped.get("type") != "pytest.xfail":
            continue
        passed = skipped is None and case.find("failure") is None and case.find("error") is None
        kind = kind_of(name := case.get("name", ""))
        if kind is None:
            premises_failed += [] if passed else [name]
            continue
        faults = next((int(p.get("value", 1)) for p in case.iter("property") if p.get("name") == "faults"), 1)
        injected[kind] += faults
        survived[kind] += faults * passed
    return injected, survived, premises_failed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("faults", __doc__)
    parser.add_argument("--repo", type=Path, default=Path("."), help="The checkout holding tests/ (default: .).")
    args = parser.parse_args(argv)
    suite = suite_files(args.repo)
    if not suite:
        parser.exit(2, f"error: no {args.repo / SUITE} found: run `coevolve bench faults` in a checkout of the "
                       f"project\n")  # fmt: skip
    report = Path(tempfile.mkdtemp(prefix="coevolve-faults-")) / "faults.xml"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, suite),
                    f"--junitxml={report}", "-o", "junit_family=xunit1"], cwd=args.repo)  # xunit1 keeps properties  # fmt: skip
    seconds = time.perf_counter() - started
    injected, survived, premises_failed = counts(report)
    for kind in sorted(injected):
        print(f"{kind}: {survived[kind]}/{injected[kind]} survived")
    for name in premises_failed:
        print(f"premise failed: {name} (the counts above may not mean what they say)")
    figures = {"fault files": figure(len(suite), ""), "faults injected": figure(sum(injected.values()), ""),
               "faults survived": figure(sum(survived.values()), ""), "wall": figure(seconds, "s"),
               "premises failed": figure(len(premises_failed), "")}  # fmt: skip
    figures |= {f"{kind}: survived of injected": figure(survived[kind] / injected[kind], "") for kind in injected}
    record_result("faults", figures, command=command_line("faults", argv),
                  note=f"a fault is one test of {SUITE} ({len(suite)} files: {', '.join(p.name for p in suite)}), "
                       "or one of the kill points its kill test walks (test_premise_* are checks, not faults); "
                       "survived = its test passed, a known failure (xfail) is not")
