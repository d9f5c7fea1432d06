"""What a launched update reads off its accelerate config (sharded weights, machines), with clear errors,
and which launched updates another machine's worker joins."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS


def test_fsdp_configs_shard_and_data_parallel_ones_do_not(tmp_path):
    from coevolve.executors.accelerate_update import sharding_of

    assert sharding_of(CONFIGS / "accelerate" / "two-processes.yaml") is None
    assert sharding_of(CONFIGS / "accelerate" / "two-processes-fsdp.yaml") == {"reshard_after_forward": True}
    keep = tmp_path / "keep.yaml"
    keep.write_text("distributed_type: FSDP\nfsdp_config: {fsdp_reshard_after_forward: false}\n")
    assert sharding_of(keep) == {"reshard_after_forward": False}
    for text, message in [("distributed_type: [FSDP", "is not YAML"), ("- FSDP\n", "is not a mapping")]:
        broken = tmp_path / "broken.yaml"
        broken.write_text(text)
        with pytest.raises(ValueError, match=f"train.accelerate_config: .*broken.yaml {message}"):
            sharding_of(broken)


def test_sharded_updates_refuse_lora_before_launching(tmp_path):
    from coevolve.executors.accelerate_update import launch_update
    from coevolve.rl.hyperparams import UpdateHyperparams
    from coevolve.rl.trainer import ModelSpec, UpdateJob

    job = UpdateJob(0, UpdateHyperparams(lr=1e-3), ModelSpec("tiny-random-llama", lora_rank=4), (), ("base", None),
                    tmp_path / "ck")  # fmt: skip
    with pytest.raises(ValueError, match="shards the weights \\(FSDP\\), which needs full fine-tuning; set train.lora_rank: 0"):
        launch_update(job, str(CONFIGS / "accelerate" / "two-processes-fsdp.yaml"), job_dir=tmp_path / "job")
    assert not (tmp_path / "job").exists()


def test_machines_come_from_the_config_and_the_flow_is_machine_zero(tmp_path):
    from coevolve.executors.accelerate_update import machines_of

    assert machines_of(CONFIGS / "accelerate" / "two-processes.yaml") == 1
    assert machines_of(CONFIGS / "accelerate" / "two-machines.yaml") == 2
    for text, message in [("num_machines: 2\nmachine_rank: 1\n", "sets machine_rank 1; the flow's machine is machine 0"),
                          ("num_machines: two\n", "num_machines and machine_rank must be integers"),
                          ("num_machines: -1\n", "num_machines must be >= 1")]:  # fmt: skip
        broken = tmp_path / "broken.yaml"
        broken.write_text(text)
        with pytest.raises(ValueError, match=f"train.accelerate_config: .*broken.yaml.*{message}"):
            machines_of(broken)


def test_a_worker_joins_unfinished_launches_in_round_order(tmp_path):
    from coevolve.executors.accelerate_update import JOB_FILE, METRICS_FILE, pending_jobs, serve_machine

    for round_, finished in [(10, False), (2, False), (1, True)]:
        job_dir = tmp_path / "checkpoints" / f"round={round_}.launch"
        job_dir.mkdir(parents=True)
        (job_dir / JOB_FILE).write_text("{}")
        if finished:
            (job_dir / METRICS_FILE).write_text("{}")
    assert [j.parent.name for j in pending_jobs(tmp_path)] == ["round=2.launch", "round=10.launch"]
    assert pending_jobs(tmp_path / "no-such-run") == []
    with pytest.raises(ValueError, match="machine rank must be >= 1"):
        serve_machine(tmp_path, 0, jobs=1)
