"""Every document a committed file cites by path (a `docs/` page) is in the repository: a reader who follows
a citation finds the page, and no code relies on a document outside the project."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"(?<![\w/.-])docs/[\w./-]+\.(?:md|png)")
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg")


def _committed() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in listed.splitlines() if name.endswith(TEXT)]


def test_no_committed_file_cites_a_document_the_repository_lacks():
    missing = []
    for path in _committed():
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        missing += [f"{path.relative_to(REPO)}: {cited}" for cited in set(CITATION.findall(text))
                    if not (REPO / cited).exists()]  # fmt: skip
    assert sorted(missing) == []


def test_the_projects_account_of_the_paper_holds_its_ablation_and_cost_figures():
    text = (REPO / "docs" / "paper.md").read_text()
    for figure in ("45.18", "47.21", "47.17", "49.36", "43.29", "45.43", "56.5", "27.38", "58.50", "10 %"):
        assert figure in text, figure
