"""triples: every explored tool call as an (action, observation, exploration id) triple (step 4 of the loop).

Each call of each exploration episode becomes one row with the environment's state digest before and
after it, replayed in a fresh environment (`stages.triples.grouping`). Triples are grouped per exploration
context (`group_id`). `bootstrap-triples` does the same for round 0's `bootstrap-explore`.

    coevolve stage triples --run demo --round 9
"""

from __future__ import annotations

from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Artifact, Inputs, StageDef, StageResult
from coevolve.stages.triples.grouping import build_triples


def compute_triples(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    rows = build_triples(ctx.make_env, inputs["explorations"].rows(), inputs["steps"].rows())
    outputs = {"triples": len(rows), "groups": len({r["group_id"] for r in rows}), "ok_calls": sum(r["ok"] for r in rows)}
    return StageResult({"triples": rows}, outputs)


def _triples(name: str, explore: str) -> StageDef:
    return StageDef(
        name, 1,
        config=("env",),
        reads={"explorations": Artifact(explore, "explorations"), "steps": Artifact(explore, "steps")},
        compute=compute_triples,
    )


TRIPLES = _triples("triples", "explore")
BOOTSTRAP_TRIPLES = _triples("bootstrap-triples", "bootstrap-explore")
