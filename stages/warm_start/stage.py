"""warm-start: the supervised starts a run's `warm_start` section names, before anything else of round 0.

The policy fine-tuned on reference solutions, and the teacher of its own (`stages.warm_start.build`), are
built once per machine into the model cache (merged from a shipped adapter in seconds, else trained);
this step builds what the machine lacks and records in the run which starts it uses: their names, the
sha256 of their weights and the record of how each was made (tasks, epochs, losses). A run without a
`warm_start` section has no such step.

    coevolve sql "SELECT * FROM read_json('runs/run=demo/round=0/stage=warm-start/_manifest.json')"
"""

from __future__ import annotations

import json

from coevolve.file_hashes import file_sha256
from coevolve.pipeline.declared import StageContext
from coevolve.pipeline.stage import Inputs, StageDef, StageResult

RECORD_FIELDS = ("base_model", "start", "settings", "examples", "losses", "merged_from")
"""What the output keeps of a start's `warm_start.json` (its task ids stay there)."""


def settle_warm_starts(ctx: StageContext, round_: int, inputs: Inputs) -> StageResult:
    from coevolve.stages.warm_start.adapters import RECORD
    from coevolve.stages.warm_start.build import start_paths

    built = {path.name for path in ctx.build_warm_starts()}
    starts = {}
    paths = start_paths(ctx.config, ctx.config)  # the config names its starts; its warm_start section is the spec's
    roles = (["policy"] if ctx.config.warm_start.policy_tasks else []) + ["teacher"]
    for role, path in zip(roles, paths, strict=False):
        record = json.loads((path / RECORD).read_text()) if (path / RECORD).is_file() else {}
        weights = sorted(path.glob("*.safetensors"))
        starts[role] = {
            "name": f"{path.parent.name}/{path.name}", "built_now": path.name in built,
            "weights_sha256": {w.name: file_sha256(w) for w in weights},
            **{k: record[k] for k in RECORD_FIELDS if k in record},
        }
    return StageResult({}, starts)


WARM_START = StageDef(
    "warm-start", 1,
    config=("warm_start", "model", "teacher", "env"),
    reads={},
    compute=settle_warm_starts,
)
