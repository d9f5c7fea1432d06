"""Build a teacher of its own (`teacher.type: local`) and print its path.

    coevolve bench teacher-warm-start --root ROOT --start ROOT/warm-start/<policy warm start> --tasks 48

`stages.warm_start.build.teacher_checkpoint`: the policy's warm-started checkpoint (so the teacher can still
act in explorations) fine-tuned on the teacher's replies for fresh training-family tasks drawn with
another seed than the policy's warm start (never a task of any split): one abstraction example per task,
with distractor calls it must leave out, and one reflection example per task. The checkpoint goes to
`<root>/warm-start/teacher-<hash>/`; measure it with `coevolve bench abstraction-probe --model <path>`,
use it with `--set teacher.type=local --set teacher.model=<path>`. `coevolve bench learning` builds the
same checkpoint for its evolving arms (`--teacher-tasks`). A tool, not a benchmark: it records no result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from coevolve.benchmarks.learning.arms import DEFAULT_CONFIG, TEACHER_BUILD
from coevolve.benchmarks.suite import argument_parser
from coevolve.stages.warm_start.build import MAX_DISTRACTORS


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("teacher-warm-start", __doc__)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--start", type=Path, required=True, help="checkpoint to start from")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--tasks", type=int, default=TEACHER_BUILD.tasks, help="tasks; each gives an abstraction and a reflection example")
    parser.add_argument("--epochs", type=int, default=TEACHER_BUILD.epochs)
    parser.add_argument("--max-distractors", type=int, default=MAX_DISTRACTORS, help="distractor calls per abstraction example: 0 to this many")
    parser.add_argument("--seed", type=int, default=TEACHER_BUILD.seed, help="task draw; the policy's warm start uses 0")
    args = parser.parse_args(argv)

    from coevolve.config import load_config
    from coevolve.stages.warm_start.build import teacher_checkpoint

    settings = replace(TEACHER_BUILD, tasks=args.tasks, epochs=args.epochs, seed=args.seed)
    path = teacher_checkpoint(load_config(args.config), args.start, settings, args.root / "warm-start",
                              max_distractors=args.max_distractors)  # fmt: skip
    print(path)


if __name__ == "__main__":
    main()
