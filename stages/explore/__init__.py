"""The `explore` stage: the teacher reflects on each signal and re-explores its world (step 3 of the loop).

- stage.py: the stage (which signals, guided or unguided targets, the oracle curricula)
- exploration.py: signal selection (`explore.allotment`), reflection, exploration contexts and the episodes
- named_tool.py: the tool a signal names, its app's listing, the prefilled first call (extensions)
- curriculum.py: the learning benchmark's ceilings, `oracle` and `oracle-gap` (not CoEvolve)
- prompts/: reflect.md, explore.md, explore_follow_up.md, explore_named_tool.md (loaded by `prompting.py`)

Tests: tests/unit/test_exploration.py, test_exploration_named_tool.py, test_curriculum.py, test_coverage_gap.py.
"""
