"""The run page shows TRL's figures under TRL's names: the rollout's (`frac_reward_zero_std`, `completions/*`,
`tools/*`, from the rollout manifest) and the update's `sampling/importance_sampling_ratio/*` (from its per-step
records), as a table and as charts. A round whose rollout recorded none, and a run without any, show none."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from coevolve.benchmarks.ui_pages import filled
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import Manifest
from coevolve.storage.store import RunStore
from coevolve.ui.app import create_app
from tests.unit.test_ui import chart_specs

RUN, PLAIN = "trl-named", "no-figures"
ROLLOUT = {  # round 1's rollout; round 0's is from before the figures were recorded
    "success_rate": 0.5, "frac_reward_zero_std": 0.25, "completions_mean_length": 37.5,
    "completions_clipped_ratio": 0.125, "tools_call_frequency": 2.5, "tools_failure_frequency": 0.2,
}  # fmt: skip
STEPS = [  # round 1's update: two optimizer steps with importance-sampling weights
    {"loss": 0.1, "is_ratio_min": 0.9, "is_ratio_mean": 1.0, "is_ratio_max": 1.5},
    {"loss": 0.2, "is_ratio_min": 0.7, "is_ratio_mean": 0.96, "is_ratio_max": 1.25},
]


def write_rounds(root: Path, run: str, outputs: dict[int, tuple[dict, dict]]) -> None:
    """Per round: a rollout and a grpo_update manifest with the given outputs (trajectories for the views)."""
    store = RunStore(RunLayout(root, run))
    for round_, (rollout, update) in outputs.items():
        table = filled("trajectories", 2, {"run": run, "round": round_, "source": "rollout", "task_id": "t",
                                           "trajectory_id": [f"{run}-{round_}-{i}" for i in range(2)]})  # fmt: skip
        refs = {"trajectories": store.write(round_, "rollout", "trajectories", table)}
        store.write_manifest(Manifest("rollout", run, round_, "k", 1, refs, rollout, started_at=time.time()))
        store.write_manifest(Manifest("grpo_update", run, round_, "k", 1, {}, update, started_at=time.time()))


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> TestClient:
    root = tmp_path_factory.mktemp("trl")
    write_rounds(root, RUN, {0: ({"success_rate": 0.25}, {"loss": 0.3}),
                             1: (ROLLOUT, {"loss": 0.15, "steps": STEPS})})  # fmt: skip
    write_rounds(root, PLAIN, {0: ({"success_rate": 0.25}, {"loss": 0.3, "steps": [{"loss": 0.3}]})})
    return TestClient(create_app(root), base_url="http://127.0.0.1")


def table_rows(page: str) -> list[list[str]]:
    table = re.search(r'<table id="trl-figures">(.*?)</table>', page, re.S)
    assert table, "no TRL figures table"
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)]  # fmt: skip


def test_the_run_page_tables_trls_figures_under_trls_names(client):
    header, *rows = table_rows(client.get(f"/runs/{RUN}").text)
    assert header == ["round", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio",
                      "tools/call_frequency", "tools/failure_frequency", "sampling/importance_sampling_ratio/min",
                      "sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/max"]  # fmt: skip
    # round 0 recorded none of them: not a row of dashes; the weights: min of minima, mean of means, max of maxima
    assert rows == [["round 1", "0.25", "37.5", "0.125", "2.5", "0.2", "0.7", "0.98", "1.5"]]


def test_the_run_page_charts_trls_figures(client):
    charts = chart_specs(client.get(f"/runs/{RUN}").text)
    zero_std = charts["frac_reward_zero_std"]
    assert (zero_std["title"], zero_std["y"], zero_std["x"]) == ("frac_reward_zero_std", "fraction", [1])
    assert zero_std["series"][0] | {"colour": None} == {"label": RUN, "values": [0.25], "colour": None}
    assert charts["completions/mean_length"]["y"] == "value"
    weights = charts["sampling/importance_sampling_ratio"]
    assert {s["label"]: s["values"] for s in weights["series"]} == {"min": [0.7], "mean": [pytest.approx(0.98)],
                                                                    "max": [1.5]}  # fmt: skip


def test_a_run_without_the_figures_shows_no_trl_section(client):
    page = client.get(f"/runs/{PLAIN}").text
    assert 'id="trl-figures"' not in page and "frac_reward_zero_std" not in chart_specs(page)
