"""bfcl-eval's own `multi_turn_checker`, wrapped for parity tests and benchmarks only (never for rollouts).

The official executor caches backend instances in `multi_turn_utils`' module `globals()` under
`<model_name>_<test_id>_<class>_instance` and runs calls with `eval`. Each call here therefore gets a
fresh unique model name, and every key it created is deleted afterwards, so calls share no state.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any


def official_check(
    entry: dict[str, Any],
    model_steps: Sequence[Sequence[Sequence[str]]],
    ground_truth: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """The official verdict for decoded model steps (call strings per step per turn) on one BFCL entry."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    model_name = f"coevolve_parity_{uuid.uuid4().hex}"
    category = entry["id"].rsplit("_", 1)[0]
    try:
        if len(model_steps) != len(ground_truth):  # the eval runner's force-terminated check
            return {"valid": False, "error_type": "multi_turn:force_terminated"}
        steps = [[list(step) for step in turn if step] for turn in model_steps]
        return multi_turn_checker(steps, [list(t) for t in ground_truth], entry, category, model_name)
    finally:
        cache = vars(multi_turn_utils)
        for key in [k for k in cache if k.startswith(model_name + "_")]:
            del cache[key]
