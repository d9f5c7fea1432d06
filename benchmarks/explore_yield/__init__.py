"""Each link of the exploration measured alone, before any training, on validation worlds.

    coevolve bench explore-yield                                   # the coverage teacher, the control
    coevolve bench explore-yield --teacher demo-named-tool --variant full --worlds 2 --rounds 1

On validation worlds of the coverage environment (`configs/coverage-smollm2.yaml`), a signal names each gap
tool (`targets`: a listing-only trajectory of a world offering it), and the evolution stages' own logic
runs on those targets with the config's settings and teacher warm start, no training (`run`): reflection
and exploration, triples, abstraction, verification. Per teacher and variant (`cli.TEACHERS`,
`cli.VARIANTS`; `control` names no tool), from one row per exploration (`links`):

    (a) P(an exploration makes a successful call of the named tool | the signal names it)
    (b) P(a candidate calling it passes verification)
    (c) admitted tasks per gap family per round

each proportion with its Wilson interval. Threshold, written down before it ran (`links.THRESHOLD`):
(a) >= 0.5 and at least one admitted task of every gap family in a round. Writes
`benchmarks/results/explore-yield/<teacher>-<variant>/` (`explorations.parquet`, `report.md`) and a row
of `benchmarks/results/explore-yield.jsonl`. A teacher's starts are built into the model cache by its first
run (`cli.TEACHERS`; the demo's are shipped and merged in seconds, a trained one takes 15 minutes or more
on 2 idle cores); the defaults (one world per gap tool, 8 explorations) then cost about 25 CPU-minutes.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    from coevolve.benchmarks.explore_yield.cli import main as run

    run(argv, __doc__)
