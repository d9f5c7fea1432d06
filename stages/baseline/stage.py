"""baseline: score the initial policy in round 0 on the held-out splits, so a run's curve starts at zero-shot.

The same evaluation as `evaluate` (`stages.evaluate.evaluate_policy`: its config, splits and sampling), with
the base weights. Writes `evals`, `trajectories` and `steps` (source `eval:<split>`).

    coevolve stage baseline --run demo --round 0
"""

from __future__ import annotations

from coevolve.pipeline.stage import EnvTasks, Policy, StageDef
from coevolve.stages.evaluate.stage import CONFIG, evaluate_policy

BASELINE = StageDef(
    "baseline", 1,
    config=CONFIG,
    reads={"tasks": EnvTasks("eval.splits"), "policy": Policy(base=True)},
    compute=evaluate_policy,
)
