"""The `explore` stage: the teacher reflects on each signal and re-explores its world (step 3 of the loop).

- stage.py: the stage (which signals, guided or unguided targets, the oracle curricula)
- exploration.py: reflection, exploration contexts and the exploration episodes
- curriculum.py: the learning benchmark's ceilings, `oracle` and `oracle-gap` (not CoEvolve)
- prompts/: reflect.md, explore.md, explore_follow_up.md (loaded by `coevolve.prompts`)

Tests: tests/unit/test_exploration.py, test_curriculum.py, test_coverage_gap.py.
"""
