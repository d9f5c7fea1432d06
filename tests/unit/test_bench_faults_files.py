"""`coevolve bench faults` runs and counts every fault file, `tests/integration/test_faults*.py`: a file
added beside `test_faults.py` (a proxy, a full disk, a planted symlink, ...) is picked up without a change
to the benchmark."""

from __future__ import annotations

import json
from pathlib import Path

from coevolve.benchmarks.faults import main

PASSES = "def test_a_fault_survived():\n    pass\n"
FAILS = "def test_a_fault_not_survived():\n    assert False\n"


def _checkout(root: Path) -> Path:
    tests = root / "tests" / "integration"
    tests.mkdir(parents=True)
    (tests / "test_faults.py").write_text(PASSES)
    (tests / "test_faults_proxy.py").write_text(PASSES.replace("survived", "survived_behind_a_proxy"))
    (tests / "test_faults_disk.py").write_text(FAILS)
    (tests / "test_flow.py").write_text(FAILS.replace("fault_not_survived", "flow"))  # no fault file
    return root


def test_every_fault_file_is_found(tmp_path):
    from coevolve.benchmarks.faults import suite_files

    repo = _checkout(tmp_path)
    assert [p.name for p in suite_files(repo)] == ["test_faults.py", "test_faults_disk.py", "test_faults_proxy.py"]


def test_the_bench_runs_and_counts_every_fault_file(tmp_path, monkeypatch, capsys):
    repo = _checkout(tmp_path / "checkout")
    monkeypatch.setenv("COEVOLVE_BENCH_RESULTS", str(tmp_path / "results"))
    main(["--repo", str(repo)])
    printed = capsys.readouterr().out
    assert "a_fault_survived: 1/1 survived" in printed
    assert "a_fault_survived_behind_a_proxy: 1/1 survived" in printed
    assert "a_fault_not_survived: 0/1 survived" in printed and "flow" not in printed
    (row,) = [json.loads(line) for line in (tmp_path / "results" / "faults.jsonl").read_text().splitlines()]
    figures = {name: figure["value"] for name, figure in row["figures"].items()}
    assert (figures["fault files"], figures["faults injected"], figures["faults survived"]) == (3, 3, 2)

