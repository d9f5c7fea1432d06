"""Which launched updates shard the weights: read off the accelerate config, with clear errors."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS


def test_fsdp_configs_shard_and_data_parallel_ones_do_not(tmp_path):
    from stages.distributed_update import sharding_of

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
    from flows.config import load_config
    from stages.distributed_update import launch_update

    config = load_config(CONFIGS / "test-tiny.yaml", [
        f"train.accelerate_config={CONFIGS / 'accelerate' / 'two-processes-fsdp.yaml'}", "train.lora_rank=4"])  # fmt: skip
    with pytest.raises(ValueError, match="shards the weights \\(FSDP\\), which needs full fine-tuning; set train.lora_rank: 0"):
        launch_update(config, root=tmp_path, run="r", round_=0, previous=("base", None),
                      checkpoint=tmp_path / "ck", job_dir=tmp_path / "job")  # fmt: skip
    assert not (tmp_path / "job").exists()
