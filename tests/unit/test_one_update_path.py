"""One update path (`rl.trainer`): the grpo_update stage's update is `train_round(job, state)`, whatever the
number of processes. The job the stage builds names only what it declares (the rollout's samples files with
the sha256 its key hashed, the policy after round r-1) and survives the launcher's JSON exactly; a fresh
process that builds its state from the job (`load_train_state`, what every launched process does) computes
bit for bit the weights the stage computed on its in-memory policy; a samples file that is not the recorded
one is refused. (Two processes against one: tests/integration/test_distributed_update.py.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.runner import run_stage
from coevolve.pipeline.stage import Artifact
from coevolve.rl.hyperparams import UpdateHyperparams, update_hyperparams
from coevolve.rl.is_correction import ISCorrection
from coevolve.rl.schedule import LrSchedule
from coevolve.rl.trainer import ModelSpec, SamplesFile, UpdateJob, load_train_state, train_round
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.grpo_update.stage import GRPO_UPDATE, update_job
from coevolve.stages.rollout.stage import ROLLOUT
from tests.conftest import CONFIGS, oracle_engines


def _weights(checkpoint) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(checkpoint / "model.safetensors"))


def test_a_job_survives_the_launchers_json_exactly(tmp_path):
    hp = UpdateHyperparams(lr=2e-5 / 3, beta=0.04, lr_schedule=LrSchedule("cosine", 2, 17), first_step=6,
                           is_correction=ISCorrection("token_truncate", 2.5), max_grad_norm=None)  # fmt: skip
    job = UpdateJob(3, hp, ModelSpec("tiny-random-llama", lora_rank=4, lora_alpha=8.0),
                    (SamplesFile(tmp_path / "a.parquet", "ab" * 32),), ("r2-0123", tmp_path / "round=2"),
                    tmp_path / "round=3")  # fmt: skip
    import json

    assert UpdateJob.from_json(json.loads(json.dumps(job.to_json()))) == job
    served = load_config(CONFIGS / "test-tiny.yaml", ["model.servers=[http://x]", "train.lr_scheduler_type=linear",
                                                      "train.schedule_rounds=4"])  # fmt: skip
    derived = update_hyperparams(served, 2)
    assert UpdateHyperparams.from_json(json.loads(json.dumps(derived.to_json()))) == derived
    assert derived.is_correction is not None and derived.lr_schedule is not None and derived.first_step == 2


def test_a_fresh_process_state_computes_the_stages_update_bit_for_bit(tmp_path):
    config = load_config(CONFIGS / "test-tiny.yaml", ["rollout.tasks_per_round=3", "train.beta=0.04"])
    ctx = open_run(config, "one", tmp_path, quiet=True, engine_factory=oracle_engines())
    run_stage(BOOTSTRAP, ctx, 0)
    for round_ in (0, 1):
        run_stage(ROLLOUT, ctx, round_)
        run_stage(GRPO_UPDATE, ctx, round_)

    view = StageContext(ctx, GRPO_UPDATE.config, GRPO_UPDATE.name)
    for round_ in (0, 1):  # round 1 starts from round 0's checkpoint and optimizer state
        samples = Artifact("rollout", "samples").load(ctx, round_)
        job = update_job(view, round_, samples, tmp_path / f"again-{round_}")
        manifest = ctx.store.completed(round_, "rollout")
        assert [f.sha256 for f in job.samples] == [manifest.artifacts["samples"].sha256]
        assert job.start == ctx.policy_after(round_ - 1)
        result = train_round(job, load_train_state(job, device="cpu"))
        assert result.groups_with_signal == 3 and result.optimizer_steps == 1
        stage, fresh = _weights(ctx.store.layout.checkpoint_dir(round_)), _weights(job.checkpoint)
        assert stage.keys() == fresh.keys()
        assert all(torch.equal(stage[name], fresh[name]) for name in stage), round_
        base = _weights(ctx.store.layout.checkpoint_dir(0)) if round_ else None
        assert base is None or any(not torch.equal(base[n], fresh[n]) for n in base)  # round 1 moved them

    changed = dataclasses.replace(job, samples=(SamplesFile(job.samples[0].path, "0" * 64),))
    with pytest.raises(RuntimeError, match="samples file .* is not the one its manifest records"):
        train_round(changed, load_train_state(job, device="cpu"))
