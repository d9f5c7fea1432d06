"""The `warm-start` step: the supervised starts of a run's policy and teacher, before round 0.

- stage.py: the step (which starts the run uses, recorded in its manifest)
- build.py: building the starts into the model cache (`build_warm_starts`, `with_warm_starts`)
- adapters.py: the shipped LoRA adapters a start is merged from
- teacher_examples.py: the reflection and abstraction replies a teacher's start trains on

Tests: tests/unit/test_warm_start.py, test_start_adapters.py, test_warm_start_config.py.
"""
