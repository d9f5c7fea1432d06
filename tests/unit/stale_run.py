"""A tiny run whose stages record what they read, and a re-run of its rollout that leaves their readers stale:
what the web view and the notebook must mark (tests/unit/test_ui_stale.py, tests/unit/test_notebook.py).

The run is `tests.unit.test_ui.write_one_round_run` (round 0 of run `one-round`: bootstrap, baseline,
rollout, signals, abstraction, verification, merge, evaluation) with a GRPO update added, and the
`read_from` records a stage run keeps (`Manifest.read_from`): signals and the update read the rollout's
trajectories, the evaluation reads the update's policy. `rerun_rollout` is the stage re-run: it writes
round 0's trajectories again through `RunStore` with other rows (every episode failed) and a new manifest,
as `coevolve stage rollout --set rollout.max_new_tokens=8` does; running that command needs a model (minutes).
"""

from __future__ import annotations

import time
from pathlib import Path

from coevolve.benchmarks.ui_pages import filled
from coevolve.storage.layout import RunLayout
from coevolve.storage.manifest import InputRef, Manifest
from coevolve.storage.store import RunStore
from tests.unit.test_ui import ONE, write_one_round_run

STALE_AFTER_RERUN = [
    ("signals", 0, "reads round 0 rollout's trajectories, rewritten since it ran"),
    ("grpo_update", 0, "reads round 0 rollout's trajectories, rewritten since it ran"),
    ("evaluate", 0, "reads the policy of round 0 grpo_update, which is stale"),
]
"""`stale_stages` of the run after `rerun_rollout`, in the order the stages ran."""


def write_recorded_run(root: Path) -> RunStore:
    """Run `one-round` under `root`, nothing stale: every recorded input is what its upstream holds."""
    write_one_round_run(root)
    store = RunStore(RunLayout(root, ONE))
    ran = (store.manifest(0, "merge").started_at + store.manifest(0, "evaluate").started_at) / 2  # between them
    update = store.write(0, "grpo_update", "updates", filled("updates", 1, {"run": ONE, "round": 0, "loss": 0.25,
                                                                          "kl": 0.01, "policy_version": "r0-1"}))  # fmt: skip
    store.write_manifest(Manifest("grpo_update", ONE, 0, "key-grpo_update", 1, {"updates": update},
                                  {"policy_version": "r0-1"}, started_at=ran, seconds=0.1))  # fmt: skip
    record_reads(store)
    return store


def record_reads(store: RunStore) -> None:
    """Each reader's manifest records what it read as its upstream holds it now (what a stage run that
    recomputes it writes): signals and the update the rollout's trajectories, the evaluation the policy."""
    trajectories = store.manifest(0, "rollout").artifacts["trajectories"].sha256
    reads = {"signals": [InputRef(0, "rollout", "artifacts.trajectories", trajectories)],
             "grpo_update": [InputRef(0, "rollout", "artifacts.trajectories", trajectories)],
             "evaluate": [InputRef(0, "grpo_update", "outputs.policy_version", "r0-1")]}  # fmt: skip
    for stage, read_from in reads.items():
        manifest = store.manifest(0, stage)
        manifest.read_from = read_from
        store.write_manifest(manifest)


def rerun_rollout(store: RunStore) -> None:
    """Round 0's rollout computed again with other results: the same four episodes, every one failed."""
    before = store.manifest(0, "rollout")
    trajectories = store.write(0, "rollout", "trajectories", filled("trajectories", 4, {
        "run": ONE, "round": 0, "trajectory_id": [f"o-{i}" for i in range(4)], "source": "rollout",
        "task_id": "t-0", "reward": 0.0, "success": False, "finish": "parse_error", "messages": "[]"}))  # fmt: skip
    assert trajectories.sha256 != before.artifacts["trajectories"].sha256
    store.write_manifest(Manifest("rollout", ONE, 0, "key-rollout-8-tokens", 1, {"trajectories": trajectories}, {},
                                  started_at=time.time(), seconds=0.1))  # fmt: skip
