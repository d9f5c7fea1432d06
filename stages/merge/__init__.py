"""The `merge` stage: D_{r+1} = D_r + the admitted tasks (step 7 of the loop).

- stage.py: the stage
- merging.py: which tasks are admitted, their weights, the new dataset version

Tests: tests/unit/test_merging.py.
"""
