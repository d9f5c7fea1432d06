"""grpo_update under `accelerate launch` (`train.accelerate_config`): two CPU processes over gloo give the
update one process gives, round after round (the second round starts from the first one's checkpoint and
optimizer state), and the flow's policy holds the new weights afterwards.

The tiny random model never earns a reward, so its groups would carry no signal: rollouts come from the
named fake `OracleEngine` (solves every other episode); the tiny model is what both paths train.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import CONFIGS, oracle_engines

pytestmark = pytest.mark.slow


def _weights(checkpoint) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(checkpoint.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def assert_same_update(two: torch.Tensor, one: torch.Tensor, *, lr: float) -> None:
    """Weights equal up to the order of float sums. AdamW divides by sqrt(v): where an element's gradient is
    about 0, reduction-order noise becomes a visible share of one step (on one 2-core machine: 1 element of
    4096 off by 2 % of lr, every other one within 1e-6), so a few elements may differ, by a small part of lr."""
    diff = (two - one).abs()
    assert diff.max().item() <= 0.05 * lr, f"largest difference {diff.max().item():.3g} (lr {lr})"
    assert (diff > 1e-6).float().mean().item() <= 1e-3, f"{int((diff > 1e-6).sum())} of {diff.numel()} elements differ"


@pytest.fixture
def second_machine(tmp_path):
    """`coevolve update-worker` as machine 1 of run "two" (both machines on this host, over loopback)."""
    worker = subprocess.Popen([str(Path(sys.executable).with_name("coevolve")), "update-worker", "--root",
                               str(tmp_path), "--run", "two", "--machine-rank", "1", "--jobs", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    yield worker
    worker.kill()
    worker.wait()


@pytest.mark.parametrize("launcher", ["two-processes.yaml", "two-processes-fsdp.yaml", "two-machines.yaml"])
def test_two_processes_update_like_one(tmp_path, launcher, request):
    """Data parallel (whole copies), FSDP (sharded weights) or two machines (a worker joining each launch):
    the same update as one process."""
    from coevolve.config import load_config
    from coevolve.flows.run_context import open_run
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.bootstrap.stage import BOOTSTRAP
    from coevolve.stages.grpo_update.stage import GRPO_UPDATE
    from coevolve.stages.rollout.stage import ROLLOUT
    from coevolve.storage.catalog import query

    worker = request.getfixturevalue("second_machine") if launcher == "two-machines.yaml" else None
    launcher = CONFIGS / "accelerate" / launcher
    contexts = {}
    three = ["rollout.tasks_per_round=3"]  # 3 groups, one micro-batch each: process 1 has one pass fewer
    for run, overrides in [("one", three), ("two", [*three, f"train.accelerate_config={launcher}"])]:
        ctx = open_run(load_config(CONFIGS / "test-tiny.yaml", overrides), run, tmp_path, quiet=True,
                       engine_factory=oracle_engines())
        run_stage(BOOTSTRAP, ctx, 0)
        for round_ in (0, 1):
            run_stage(ROLLOUT, ctx, round_)
            run_stage(GRPO_UPDATE, ctx, round_)
        contexts[run] = ctx

    launched = contexts["two"].store.layout.checkpoint_dir(1).with_name("round=1.launch")
    assert json.loads((launched / "metrics.json").read_text())["processes"] == 2
    assert (json.loads((launched / "job.json").read_text())["sharding"] is None) == ("fsdp" not in launcher.name)
    samples = query(tmp_path, "SELECT run, round, input_ids, reward FROM samples ORDER BY ALL").to_pylist()
    by_run = {run: [(s["round"], s["input_ids"], s["reward"]) for s in samples if s["run"] == run]
              for run in contexts}  # fmt: skip
    assert by_run["one"] == by_run["two"]  # round 1 sampled from equal updated policies

    updates = query(tmp_path, "SELECT run, round, loss, grad_norm, tokens, groups_with_signal FROM updates "
                              "ORDER BY round, run").to_pylist()  # fmt: skip
    for one, two in zip(updates[0::2], updates[1::2], strict=True):
        assert one["tokens"] == two["tokens"] and one["groups_with_signal"] == two["groups_with_signal"] == 3
        assert one["grad_norm"] == pytest.approx(two["grad_norm"], rel=1e-5)
        assert one["loss"] == pytest.approx(two["loss"], rel=1e-4, abs=1e-7)
    for round_ in (0, 1):
        one = _weights(contexts["one"].store.layout.checkpoint_dir(round_))
        two = _weights(contexts["two"].store.layout.checkpoint_dir(round_))
        assert one.keys() == two.keys()
        for name in one:
            assert_same_update(two[name], one[name], lr=contexts["one"].config.train.lr)

    if worker is not None:  # machine 1 joined both rounds' launches, then stopped
        output = worker.communicate(timeout=60)[0]
        assert worker.returncode == 0, output
        assert output.count("exit 0") == 2 and "joining round=1.launch as machine 1 of 2" in output
        assert (launched / "launch-machine-1.log").is_file()

    # the flow's in-memory policy is the launched update's result
    policy = contexts["two"].policy
    in_memory = {k: v for k, v in policy.model.state_dict().items() if k in two}
    assert in_memory and all(torch.equal(in_memory[k], two[k]) for k in in_memory)


def test_a_missing_accelerate_config_names_the_field(tmp_path):
    from coevolve.config import load_config
    from coevolve.flows.run_context import open_run
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.bootstrap.stage import BOOTSTRAP
    from coevolve.stages.grpo_update.stage import GRPO_UPDATE
    from coevolve.stages.rollout.stage import ROLLOUT

    config = load_config(CONFIGS / "test-tiny.yaml", ["train.accelerate_config=nowhere/accelerate.yaml"])
    ctx = open_run(config, "broken", tmp_path, quiet=True)
    run_stage(BOOTSTRAP, ctx, 0)
    run_stage(ROLLOUT, ctx, 0)
    with pytest.raises(FileNotFoundError, match="train.accelerate_config: no accelerate config file"):
        run_stage(GRPO_UPDATE, ctx, 0)
