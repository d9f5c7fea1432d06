"""grpo_update: one GRPO update of the policy on exactly the samples of round r's rollout (on-policy).

Reads `samples` of rollout r and the policy after round r-1; trains the in-memory model (the engine's
own model object on CPU), saves a checkpoint in HF layout under `checkpoints/round=r/`, and writes one
`updates` row. The new policy version is derived from this stage's cache key, so a resumed run finds
exactly the checkpoint that belongs to its inputs.

With `train.accelerate_config` the update runs under `accelerate launch` instead
(`executors.accelerate_update`, log in `checkpoints/round=r.launch/`), and the in-memory policy then loads
the checkpoint it wrote.

    coevolve stage grpo_update --run demo --round 1
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve.pipeline.context import RunContext
from coevolve.pipeline.stage import Artifact, Inputs, Policy, StageDef, StageResult

if TYPE_CHECKING:
    from coevolve.agents.policy import Policy as PolicyModel


def update_policy(ctx: RunContext, round_: int, inputs: Inputs) -> StageResult:
    from coevolve.rl.batch import samples_batch
    from coevolve.rl.checkpoint import remove_leftovers

    policy = inputs["policy"]
    base = policy.version
    version = f"r{round_}-{inputs.key[:12]}"
    checkpoint = ctx.store.layout.checkpoint_dir(round_)
    remove_leftovers(checkpoint.parent)  # of a writer killed half-way (the run's lock is held)
    started = time.perf_counter()
    if ctx.config.train.accelerate_config:
        metrics = _launched_update(ctx, round_, checkpoint)
        policy.ensure(version, checkpoint)  # the flow's policy (and its servers) now hold the new weights
    else:
        metrics = _in_process_update(ctx, round_, policy, samples_batch(inputs["samples"].table()), checkpoint)
        policy.publish(version, checkpoint)
    _prune_checkpoints(ctx, round_)
    row = {
        "step": round_, "base_version": base, "policy_version": version,
        "loss": metrics["loss"], "pg_loss": metrics["pg_loss"], "kl": metrics["kl"],
        "clip_fraction": metrics["clip_fraction"], "grad_norm": metrics["grad_norm"], "lr": metrics["lr"],
        "tokens": int(metrics["tokens"]), "samples": int(metrics["samples"]),
        "groups_with_signal": int(metrics["groups_with_signal"]), "seconds": time.perf_counter() - started,
        "checkpoint": str(checkpoint),
    }
    outputs = {"policy_version": version, "checkpoint": str(checkpoint), **{k: row[k] for k in (
        "loss", "kl", "grad_norm", "tokens", "groups_with_signal", "seconds")}}
    return StageResult({"updates": [row]}, outputs, folders=(checkpoint,))


def _in_process_update(ctx: RunContext, round_: int, policy: PolicyModel, batch: Any,
                       checkpoint: Path) -> dict[str, float]:
    from coevolve.agents.policy import update_hyperparams
    from coevolve.rl.checkpoint import save_checkpoint
    from coevolve.rl.update import grpo_update, progress_total

    hp = update_hyperparams(ctx.config)
    reference = policy.reference_model() if hp.beta > 0 else None
    with ctx.progress(f"round {round_} update", progress_total(batch, hp)) as advance:
        result = grpo_update(policy.model, reference, policy.make_optimizer(), batch, hp, progress=advance)
    save_checkpoint(policy.model, policy.tokenizer, policy.optimizer, checkpoint)
    return result.as_dict()


def _launched_update(ctx: RunContext, round_: int, checkpoint: Path) -> dict[str, float]:
    """The update under `accelerate launch` (`executors.accelerate_update`), its log under the round's
    checkpoint folder."""
    from coevolve.executors.accelerate_update import launch_update

    job_dir = checkpoint.with_name(f"{checkpoint.name}.launch")
    if not ctx.quiet:
        print(f"round {round_} update: accelerate launch ({ctx.config.train.accelerate_config}), log {job_dir}")
    return launch_update(ctx.config, root=ctx.store.layout.root, run=ctx.run, round_=round_,
                         previous=ctx.policy_after(round_ - 1), checkpoint=checkpoint, job_dir=job_dir)  # fmt: skip


def _prune_checkpoints(ctx: RunContext, round_: int) -> None:
    keep = ctx.config.train.keep_checkpoints
    for old in range(round_ - keep, -1, -1):
        directory = ctx.store.layout.checkpoint_dir(old)
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)


GRPO_UPDATE = StageDef(
    "grpo_update", 1,
    config=("train", "model", "rollout.temperature"),
    reads={"samples": Artifact("rollout", "samples"), "policy": Policy(after_round=-1)},
    compute=update_policy,
)
