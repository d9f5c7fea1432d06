"""grpo_update: one GRPO update of the policy on exactly the samples of round r's rollout (on-policy).

Reads `samples` of rollout r and the policy after round r-1; trains the in-memory model (the engine's
own model object on CPU), saves a checkpoint in HF layout under `checkpoints/round=r/`, and writes one
`updates` row. The new policy version is derived from this stage's cache key, so a resumed run finds
exactly the checkpoint that belongs to its inputs. The manifest and the row name the checkpoint relative
to the run's folder (`checkpoints/round=r`), and the manifest records the sha256 of each of its files: a
runs folder moved or copied continues with its own weights, and weights that are not those are refused.

The update is one function whatever the number of processes (`rl.trainer.train_round`): the stage resolves
its declared inputs into an `UpdateJob` (the samples files and the sha256 its key hashed, the policy after
round r-1, the model, the settings derived once: `rl.hyperparams`) and runs it on the in-memory policy, or
with `train.accelerate_config` in every process `accelerate launch` starts (`executors.accelerate_update`,
log in `checkpoints/round=r.launch/`), after which the in-memory policy loads the checkpoint they wrote.

The manifest's outputs carry the update's per-optimizer-step metrics (`steps`, `rl.update_metrics`) and
its group count beside the `updates` row's values: `flows.tracking` logs them per step, `flows.summary` per
round.

Only the newest two checkpoints of the run keep their optimizer state (`optimizer.pt`, twice the weights'
size; `OPTIMIZER_STATES_KEPT`): once this round's manifest is written (never before: a run killed in
between computes this update again, from the state it started from), older checkpoints beyond
`train.keep_checkpoints` are deleted, and the optimizer state of any other older one
(`rl.checkpoint.drop_optimizer_state`, which leaves a note); its weights stay as recorded, and load as
before. No older round's manifest is rewritten: every check of a manifest's files skips a pruned folder
and a file whose note says it was dropped (`storage.parquet.changed_in_folder`). A run continues from its
newest checkpoint (in memory, or from its `optimizer.pt` after a restart), and its newest update, computed
again (its checkpoint damaged), continues from the one before it: both exact. An update that continues from an older round's weights
(`coevolve stage grpo_update --round R --force` of an older round, a fork from an older round) starts its
optimizer fresh instead, and says so in one line; with an accelerate config that shards the weights (FSDP)
it is refused in one line.

An update that diverges (a non-finite loss, gradient norm or weights, `rl.divergence.DivergenceError`) stops
before anything is saved, as one `UpdateDivergedError` naming the round, the optimizer step and the likely
cause: no checkpoint, no manifest, so the run continues from this update once the config is changed.

    coevolve stage grpo_update --run demo --round 1
"""

from __future__ import annotations

import re
import shutil
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, Inputs, Policy, StageDef, StageResult, Upstream
from coevolve.storage.layout import checkpoint_name
from coevolve.storage.parquet import ArtifactError

if TYPE_CHECKING:
    from coevolve.agents.policy import Policy as PolicyModel
    from coevolve.rl.divergence import DivergenceError
    from coevolve.rl.trainer import UpdateJob


OPTIMIZER_STATES_KEPT = 2
"""The newest checkpoints that keep their optimizer state: the newest, to continue from, and the one it was
trained from, so that the newest update, killed before its manifest or its checkpoint damaged, is computed
again exactly."""


class UpdateDivergedError(ArtifactError):
    """A round's GRPO update diverged; nothing of it was saved (shown as one paragraph by the CLI)."""


def update_policy(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    from coevolve.rl.checkpoint import remove_leftovers

    policy = inputs["policy"]
    base = policy.version
    version = f"r{round_}-{inputs.key[:12]}"
    checkpoint = ctx.store.layout.checkpoint_dir(round_)
    remove_leftovers(checkpoint.parent)  # of a writer killed half-way (the run's lock is held)
    started = time.perf_counter()
    job = update_job(ctx, round_, inputs["samples"], checkpoint)
    if ctx.config.train.accelerate_config:
        metrics = _launched_update(ctx, job)
        policy.ensure(version, checkpoint)  # the flow's policy (and its servers) now hold the new weights
    else:
        metrics = _in_process_update(ctx, job, policy)
        policy.publish(version, checkpoint)
    row = {
        "step": round_, "base_version": base, "policy_version": version,
        "loss": metrics["loss"], "pg_loss": metrics["pg_loss"], "kl": metrics["kl"],
        "clip_fraction": metrics["clip_fraction"], "grad_norm": metrics["grad_norm"], "lr": metrics["lr"],
        "tokens": int(metrics["tokens"]), "samples": int(metrics["samples"]),
        "groups_with_signal": int(metrics["groups_with_signal"]), "seconds": time.perf_counter() - started,
        "checkpoint": checkpoint_name(round_),
    }
    outputs = {"policy_version": version, "checkpoint": checkpoint_name(round_), **{k: row[k] for k in (
        "loss", "kl", "grad_norm", "tokens", "groups_with_signal", "seconds")},
        "groups": int(metrics["groups"]), "groups_dropped": int(metrics.get("groups_dropped", 0)),
        "steps": list(metrics.get("steps", ()))}  # steps: for trackers
    return StageResult({"updates": [row]}, outputs, folders=(checkpoint,),
                       after_manifest=lambda: _keep_newest_checkpoints(ctx, round_))


def update_job(ctx: StageContext, round_: int, samples: Upstream, checkpoint: Path) -> UpdateJob:
    """The update's declared inputs as `rl.trainer` reads them: the samples files its key hashed, the
    policy after round r-1 (its checkpoint checked), the model, and the settings derived once."""
    from coevolve.rl.hyperparams import update_hyperparams
    from coevolve.rl.trainer import ModelSpec, SamplesFile, UpdateJob

    config = ctx.config
    files = tuple(SamplesFile(path, sha) for path, sha in samples.files())
    return UpdateJob(round_, update_hyperparams(config, round_), ModelSpec.of(config.model, config.train), files,
                     ctx.checked_policy_after(round_ - 1), checkpoint)  # fmt: skip


def _in_process_update(ctx: StageContext, job: UpdateJob, policy: PolicyModel) -> dict[str, float]:
    """`rl.trainer.train_round` in this process, on the in-memory policy (the engine's own model on CPU)."""
    from coevolve.rl.divergence import DivergenceError
    from coevolve.rl.trainer import train_round

    state = policy.train_state(job.hyperparams.beta)
    if not state.optimizer.state and _optimizer_dropped_before(ctx, job.round):
        _say_fresh_optimizer(ctx, job.round)  # not continued in memory, and no saved state to continue
    try:
        result = train_round(job, state, progress=partial(ctx.progress, f"round {job.round} update"))
    except DivergenceError as exc:
        policy.version = ""  # its weights are no version's any more: the next stage that needs one reloads it
        raise diverged(ctx, job.round, exc) from None
    return result.as_dict()


def diverged(ctx: StageContext, round_: int, exc: DivergenceError) -> UpdateDivergedError:
    """The one paragraph a diverged update shows: round, step, cause, and the command that continues with the
    setting the cause names changed."""
    change = _setting_change(ctx.config, exc.cause.setting)
    advice = (f"Change the config ({change[0]}) and continue, e.g. `coevolve run --run {ctx.run} --set {change[1]}`."
              if change else f"No setting of the config is to blame; once the cause is fixed, continue with "
                             f"`coevolve run --run {ctx.run}`.")  # fmt: skip
    return UpdateDivergedError(
        f"round {round_} of run '{ctx.run}': {exc}. Nothing of this update was saved (no checkpoint, no "
        f"grpo_update manifest). {advice}"
    )


def _setting_change(config: Any, setting: str | None) -> tuple[str, str] | None:
    """What the paragraph of a divergence caused by `setting` shows of the config, and an override to try."""
    train = config.train
    changes = {
        "model.dtype": (f"model.dtype {config.model.dtype}", "model.dtype=float32"),
        "train.lora_alpha": (f"train.lora_alpha {train.lora_alpha:g} with train.lora_rank {train.lora_rank}",
                             f"train.lora_alpha={2 * max(train.lora_rank, 1)}"),
        "train.lr": (f"train.lr {train.lr:g}, train.max_grad_norm {train.max_grad_norm:g}, train.beta {train.beta:g}",
                     f"train.lr={train.lr / 10:g}"),
    }  # fmt: skip
    return changes.get(setting) if setting else None


def _launched_update(ctx: StageContext, job: UpdateJob) -> dict[str, float]:
    """`rl.trainer.train_round` in every process of `accelerate launch` (`executors.accelerate_update`), its
    log under the round's checkpoint folder."""
    from coevolve.config import find_config
    from coevolve.executors.accelerate_update import launch_update, sharding_of

    round_, launcher = job.round, ctx.config.train.accelerate_config or ""
    if _optimizer_dropped_before(ctx, round_):
        if sharding_of(find_config(launcher)) is not None:
            raise ArtifactError(
                f"round {round_} of run '{ctx.run}': the update continues from round {round_ - 1}'s "
                f"checkpoint, whose optimizer state was dropped (only a run's newest two checkpoints keep one), "
                f"and a sharded (FSDP) update cannot start it fresh; run it with a data-parallel "
                f"train.accelerate_config or in process (train.accelerate_config=null)"
            )
        _say_fresh_optimizer(ctx, round_)
    job_dir = job.checkpoint.with_name(f"{job.checkpoint.name}.launch")
    if not ctx.quiet:
        print(f"round {round_} update: accelerate launch ({launcher}), log {job_dir}")
    return launch_update(job, launcher, job_dir=job_dir)


def _keep_newest_checkpoints(ctx: StageContext, round_: int) -> None:
    """Once round `round_`'s manifest is written: only the newest `train.keep_checkpoints` checkpoints
    stay, and only the newest two of them keep their optimizer state (see the module docstring)."""
    _prune_checkpoints(ctx, round_)
    _drop_older_optimizer_states(ctx)


def _prune_checkpoints(ctx: StageContext, round_: int) -> None:
    keep = ctx.config.train.keep_checkpoints
    for old in range(round_ - keep, -1, -1):
        directory = ctx.store.layout.checkpoint_dir(old)
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)


def _optimizer_dropped_before(ctx: StageContext, round_: int) -> bool:
    """Whether the update of `round_` continues from a checkpoint whose optimizer state was dropped
    (`_drop_older_optimizer_states`): its optimizer then starts fresh."""
    from coevolve.rl.checkpoint import OPTIMIZER_FILE, optimizer_dropped

    previous = ctx.policy_after(round_ - 1)[1]
    if previous is None or (previous / OPTIMIZER_FILE).is_file():
        return False
    return optimizer_dropped(previous) is not None


def _say_fresh_optimizer(ctx: StageContext, round_: int) -> None:
    if not ctx.quiet:
        print(f"round {round_} update: the optimizer starts fresh: round {round_ - 1}'s checkpoint kept no "
              f"optimizer state (only the newest two checkpoints of a run keep one)", flush=True)


def _drop_older_optimizer_states(ctx: StageContext) -> None:
    """Keep optimizer state in the run's newest two checkpoints only (see the module docstring). The older
    rounds' manifests stay as their stages wrote them: the note each dropped file leaves tells every check of
    a manifest's files that it is gone on purpose (`storage.parquet.changed_in_folder`)."""
    from coevolve.rl.checkpoint import OPTIMIZER_FILE, drop_optimizer_state

    found = {int(m.group(1)): d for d in ctx.store.layout.checkpoint_dir(0).parent.glob("round=*")
             if d.is_dir() and (m := re.fullmatch(r"round=(\d+)", d.name))}  # fmt: skip
    if not found:
        return
    newest = found[max(found)]
    kept = sorted(found)[-OPTIMIZER_STATES_KEPT:]
    for old, directory in sorted(found.items()):
        if old not in kept and (directory / OPTIMIZER_FILE).is_file():
            drop_optimizer_state(directory, newest)


GRPO_UPDATE = StageDef(
    "grpo_update", 1,
    config=("train", "model", "rollout.temperature"),
    reads={"samples": Artifact("rollout", "samples"), "policy": Policy(after_round=-1)},
    compute=update_policy,
)
