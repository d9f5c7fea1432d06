"""Where a stage's cache key came from: the upstream stage runs each declared read hashed, and the value.

    read_sources(ROLLOUT, ctx, round_=1)
    # [InputRef(round=0, stage='bootstrap', field='artifacts.datasets', value='3f1c...'),
    #  InputRef(round=0, stage='grpo_update', field='outputs.policy_version', value='r0-8d2e41a0')]

The runner records them in the stage's manifest (`Manifest.read_from`), so whether a completed stage is
stale can be told from manifests alone (`storage.staleness`), by anyone who can read a run's folder: a
stage whose recorded value is no longer what its upstream manifest holds would get another cache key.
Reads of the environment's tasks or of a configured model name no upstream stage; a read that wraps
another (`When`, or any read with a `read` attribute) names its sources only while its key part is set.
"""

from __future__ import annotations

from typing import Any

from coevolve.pipeline.context import RunContext
from coevolve.pipeline.stage import Artifact, Dataset, EvolutionPolicy, EvolutionTeacher, Policy, StageDef
from coevolve.storage.manifest import InputRef

POLICY_OUTPUT = "outputs.policy_version"


def read_sources(stage: StageDef, ctx: RunContext, round_: int) -> list[InputRef]:
    """Every upstream value `stage`'s key in `round_` hashes, in declaration order, without duplicates."""
    refs: list[InputRef] = []
    for read in stage.reads.values():
        refs += [ref for ref in _sources(read, ctx, round_) if ref not in refs]
    return refs


def _sources(read: Any, ctx: RunContext, round_: int) -> list[InputRef]:
    if isinstance(read, Artifact):
        field = f"artifacts.{read.artifact}"
        return [InputRef(r, read.stage, field, ctx.store.completed(r, read.stage).artifact_sha(read.artifact, read.stage))
                for r in read.rounds(ctx, round_)]  # fmt: skip
    if isinstance(read, Dataset):
        version = ctx.datasets.version_of(round_)
        return [InputRef(version.round, version.stage, "artifacts.datasets", version.sha256)]
    if isinstance(read, Policy):
        return _policy(ctx, read.policy_round(ctx, round_))
    if isinstance(read, EvolutionPolicy):
        return _policy(ctx, read.policy_round(ctx, round_))
    if isinstance(read, EvolutionTeacher):
        policy_teacher = ctx.config.teacher.type == "policy"
        return _policy(ctx, -1 if read.base else ctx.evolution_policy_round(round_)) if policy_teacher else []
    inner = getattr(read, "read", None)
    if inner is not None and read.key_part(ctx, round_) is not None:
        return _sources(inner, ctx, round_)
    return []


def _policy(ctx: RunContext, policy_round: int) -> list[InputRef]:
    """The update that made the policy after `policy_round` (none for the base model, -1)."""
    if policy_round < 0:
        return []
    return [InputRef(policy_round, "grpo_update", POLICY_OUTPUT, ctx.policy_after(policy_round)[0])]
