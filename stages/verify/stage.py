"""verify: environment verification of the round's candidate tasks (step 6 of the loop).

Every `ok` candidate is checked in the environment (`stages.verify.checks`: replay, effect, answers,
solvability, grounding, contamination against the held-out splits, the reference satisfying the derived
checker); the survivors are attempted by the policy the round's evolution uses (`verify.attempts`):
success -> `accept`, a failure that did part of the task -> `retain`, else `discard` (the paper's rule,
`stages.verify.verification`). `verify.enabled: false` is the no-verification ablation. Writes `verifications`
(with the checker spec and the admitted task row) and the attempts as `trajectories`/`steps` with source
`verify`. `bootstrap-verify` verifies round 0's bootstrap candidates with the initial policy.

    coevolve stage verify --run demo --round 9
"""

from __future__ import annotations

from coevolve.agents.episodes import EpisodeLimits
from coevolve.contracts.verify import WRITES, VerifyOutputs
from coevolve.core import round_seed
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, EnvTasks, EvolutionPolicy, Inputs, StageDef, StageResult
from coevolve.stages.verify.verification import VerifySettings, exploration_lineage, verify_candidates


def settings_of(ctx: StageContext, round_: int, purpose: str) -> VerifySettings:
    cfg, rollout = ctx.config.verify, ctx.config.rollout
    return VerifySettings(
        cfg.attempts, cfg.greedy, rollout.temperature, rollout.max_new_tokens,
        EpisodeLimits(rollout.max_replies, rollout.max_context_tokens), cfg.contamination_jaccard,
        round_seed(ctx.config.run.seed, round_, purpose), cfg.enabled, cfg.grounding, cfg.judge,
    )


def _verify(purpose: str):
    def compute(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
        candidates = inputs["candidates"].rows()
        held_out = [task for tasks in inputs["held_out"].values() for task in tasks]
        lineage = exploration_lineage(inputs["explorations"].rows())
        settings = settings_of(ctx, round_, purpose)
        total = sum(c["status"] == "ok" for c in candidates) * (1 + settings.attempts) if settings.verify else 0
        with ctx.progress(f"round {round_} {purpose}", total) as advance:
            artifacts = verify_candidates(inputs["policy"], ctx.make_env, candidates, held_out, lineage, settings,
                                          run=ctx.run, round_=round_, progress=advance)
        return StageResult(artifacts, VerifyOutputs.of(artifacts["verifications"]).manifest())

    return compute


CONFIG = ("verify", "env", "rollout.temperature", "rollout.max_new_tokens", "rollout.max_replies",
          "rollout.max_context_tokens", "run.seed")

VERIFY = StageDef(
    "verify", 11,
    config=CONFIG,
    reads={"candidates": Artifact("abstract", "candidates"), "explorations": Artifact("explore", "explorations"),
           "held_out": EnvTasks("eval.splits"), "policy": EvolutionPolicy()},
    compute=_verify("verify"),
    writes=WRITES,
)

BOOTSTRAP_VERIFY = StageDef(
    "bootstrap-verify", 2,
    config=CONFIG,
    reads={"candidates": Artifact("bootstrap-abstract", "candidates"),
           "explorations": Artifact("bootstrap-explore", "explorations"),
           "held_out": EnvTasks("eval.splits"), "policy": EvolutionPolicy(base=True)},
    compute=_verify("bootstrap-verify"),
    writes=WRITES,
)
