"""The stages: one package per phase, named after its stage, holding its declaration (`stage.py`), its
logic (pure functions beside it) and its prompts. Which stages a round runs, in order: `round_plan.py`.

    warm_start/  bootstrap/  baseline/                          round 0 only
    rollout/                                                    step 1
    signals/  explore/  triples/  abstract/  verify/  merge/    steps 2-7, every `evolve.every` rounds
    grpo_update/  evaluate/                                     step 8; every `eval.every` rounds

A phase's logic modules import nothing of `pipeline`: only its `stage.py` (the `StageDef`, the cache key's
config fields, the inputs it reads, the compute that wires them to the logic) does.
"""
