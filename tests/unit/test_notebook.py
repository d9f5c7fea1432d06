"""notebooks/explore_run.ipynb executed (nbclient, a real kernel) on tests/unit/stale_run.py's tiny run after
a rollout re-run: it counts candidates as `coevolve.contracts.counts` does (the round line's label, not a
count of verification rows by candidate) and names each stale stage with why. `make notebook` runs it on
the demo's run; tests/integration/test_operate_inspect.py on a real tiny evolving run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.stale_run import ONE, STALE_AFTER_RERUN, rerun_rollout, write_recorded_run

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
REPO = Path(__file__).resolve().parents[2]


def test_the_notebook_counts_candidates_one_way_and_names_the_stale_stages(tmp_path, monkeypatch):
    rerun_rollout(write_recorded_run(tmp_path / "runs"))
    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path / "runs"))
    monkeypatch.setenv("RUN", ONE)
    monkeypatch.setenv("FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(REPO / "notebooks" / "explore_run.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO)}}).execute()  # fmt: skip
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    # a discarded solution whose duplicate wording was accepted in its place: 1 solution, accepted
    assert "round 0: 2 candidates: 1 distinct solution, 1 duplicate -> 1 accept / 0 retain / 0 discard; " \
           "2 wordings checked" in text  # fmt: skip
    for stage, round_, why in STALE_AFTER_RERUN:
        assert f"round {round_} {stage} is stale: {why}" in text
    assert f"`coevolve run --run {ONE}` recomputes them" in text
    assert sorted(p.name for p in (tmp_path / "figures").glob("*.png")) == [
        "dataset.png", "signals.png", "success.png", "verification.png"]  # fmt: skip
