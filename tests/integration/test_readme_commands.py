"""README's "Re-run, resume, inspect" block, run in order as a user pastes it after `make demo`.

The block is read from README.md, each line run with bash in a folder holding `runs/` (a copy of the shared
`evolved_run`, whose run name stands for `demo`), a link to `configs/` and a copy of `notebooks/` (jupyter
writes the executed notebook next to it), with the venv's executables first on PATH, COEVOLVE_HOME and the
session's Prefect API. TASK_ID and TRAJECTORY_ID stand for a prefix (8 characters) of the first id the line
before printed. The tracking line runs up to its `&&`: `tensorboard` serves until stopped, so the test checks
that its executable is there and that the run wrote the event files it reads. Each line exits 0 (compare 1,
as README says) and prints what its comment promises.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, Spawned

pytestmark = pytest.mark.slow

ID = re.compile(r"\b[0-9a-f]{16}\b")
PLACEHOLDERS = ("TASK_ID", "TRAJECTORY_ID")
SERVES_UNTIL_STOPPED = " && tensorboard "


def readme_commands() -> list[str]:
    section = (REPO / "README.md").read_text().split("\n## Re-run, resume, inspect\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block, "README.md: no bash block under '## Re-run, resume, inspect'"
    return [line for line in block.group(1).splitlines() if line.strip()]


@dataclass(frozen=True)
class Ran:
    """One README line as run: its output, the folder it ran in, the run's name, the id a placeholder stood for."""

    out: str
    cwd: Path
    run: str
    picked: str | None


def notebook_executed(r: Ran) -> bool:
    cells = json.loads((r.cwd / "notebooks" / "explore_run.out.ipynb").read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    text = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")
    return not [o for o in outputs if o["output_type"] == "error"] and f"run '{r.run}'" in text


def tracked(r: Ran) -> bool:
    events = list((r.cwd / "runs" / f"run={r.run}" / "tracking" / "tensorboard").glob("events.out.tfevents.*"))
    return bool(events) and "round 2" in r.out and Path(sys.executable).with_name("tensorboard").exists()


def only_the_rollout_differs(r: Ran) -> bool:
    differences = [line for line in r.out.splitlines() if line.startswith("round ")]
    return bool(differences) and all(line.startswith("round 0 rollout: ") for line in differences)


EXPECTED: list[tuple[str, int, Callable[[Ran], bool]]] = [
    # (regex the line starts with, exit status, what its comment promises)
    (r"coevolve run .*--more 1", 0, lambda r: "round 2 |" in r.out),
    (r"coevolve fork ", 0, lambda r: f"run '{r.run}-more': " in r.out and "round 0: rollout" in r.out
     and "round 0 grpo_update: recomputed, its checkpoint (checkpoints/round=0) was pruned" in r.out),
    (r"coevolve evolution ", 0, lambda r: "one admitted task" in r.out and "coevolve sql" in r.out),
    (r"coevolve eval .*--env-seed 9001", 0, lambda r: "env seed 9001)" in r.out),
    (r"coevolve eval .*--env bfcl", 0, lambda r: "of 20 tasks" in r.out and ", bfcl)" in r.out),
    (r"coevolve sql ", 0, lambda r: ID.search(r.out) is not None),
    (r"coevolve show task ", 0, lambda r: r.picked in r.out and "solution" in r.out),
    (r"coevolve show trajectory ", 0, lambda r: r.picked in r.out and "assistant:" in r.out),
    (r"COEVOLVE_HOME=.* jupyter execute ", 0, notebook_executed),
    (r"coevolve run .*tracking\.report_to", 0, tracked),
    (r"cp -al runs runs-before", 0, lambda r: (r.cwd / "runs-before" / f"run={r.run}" / "config.yaml").exists()),
    (r"coevolve stage rollout ", 0, lambda r: "rollout round 0: computed" in r.out),
    (r"coevolve compare ", 1, only_the_rollout_differs),
]


def expectation(line: str) -> tuple[int, Callable[[Ran], bool]]:
    matches = [(rc, check) for pattern, rc, check in EXPECTED if re.match(pattern, line)]
    assert len(matches) == 1, f"README line without exactly one expectation in this test: {line}"
    return matches[0]


def as_run(line: str, run: str, previous_out: str) -> tuple[str, str | None]:
    """The line with `demo` read as `run`, a placeholder as a prefix of the first id printed before it, and
    the part before `tensorboard` of the tracking line."""
    command, picked = re.sub(r"\bdemo\b", run, line).split(SERVES_UNTIL_STOPPED)[0], None
    for placeholder in PLACEHOLDERS:
        if placeholder in command:
            found = ID.search(previous_out)
            assert found, f"{line}: the line before printed no id:\n{previous_out}"
            picked = found.group(0)
            command = command.replace(placeholder, picked[:8])
    return command, picked


def test_readme_commands_run_in_order(evolved_run, tmp_path):
    from coevolve.flows.prefect_api import configured_api_url

    cwd = tmp_path / "checkout"
    shutil.copytree(evolved_run.root, cwd / "runs")
    (cwd / "configs").symlink_to(REPO / "configs")
    shutil.copytree(REPO / "notebooks", cwd / "notebooks", ignore=shutil.ignore_patterns("*.out.ipynb"))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "COEVOLVE_HOME": str(cwd / "runs"),
           "PREFECT_API_URL": configured_api_url()}
    out = ""
    for i, line in enumerate(readme_commands()):
        rc, promised = expectation(line)
        command, picked = as_run(line, evolved_run.run, out)
        spawned = Spawned.start(["bash", "-c", command], tmp_path / f"{i:02d}.log", env, cwd=cwd)
        status, out = spawned.wait(600), spawned.output()
        assert status == rc, f"{command}: exit {status}, README says {rc}:\n{out[-3000:]}"
        assert promised(Ran(out, cwd, evolved_run.run, picked)), f"{command}: not what README promises:\n{out[-3000:]}"
