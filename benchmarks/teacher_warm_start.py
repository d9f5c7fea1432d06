"""Build a teacher of its own (`teacher.type: local`) and print its path.

    .venv/bin/python -u -m benchmarks.teacher_warm_start --root /tmp/suite4 \
        --start /tmp/suite4/warm-start/<policy warm start> --tasks 48

`stages.warm_start.teacher_checkpoint`: the policy's warm-started checkpoint (so the teacher can still
act in explorations) fine-tuned on the teacher's replies for fresh training-family tasks drawn with
another seed than the policy's warm start (never a task of any split): one abstraction example per task,
with distractor calls it must leave out, and one reflection example per task. The checkpoint goes to `<root>/warm-start/teacher-<hash>/`; measure it with
`benchmarks.abstraction_probe --model <path>`, use it with `--set teacher.type=local --set
teacher.model=<path>`. `coevolve bench learning` builds the same checkpoint for its evolving arms
(`--teacher-tasks`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from coevolve.benchmarks.learning import DEFAULT_CONFIG, TEACHER_BUILD
from coevolve.evolution.warm_start import MAX_DISTRACTORS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--start", type=Path, required=True, help="checkpoint to start from")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--tasks", type=int, default=TEACHER_BUILD.tasks, help="tasks; each gives an abstraction and a reflection example")
    parser.add_argument("--epochs", type=int, default=TEACHER_BUILD.epochs)
    parser.add_argument("--max-distractors", type=int, default=MAX_DISTRACTORS, help="distractor calls per abstraction example: 0 to this many")
    parser.add_argument("--seed", type=int, default=TEACHER_BUILD.seed, help="task draw; the policy's warm start uses 0")
    args = parser.parse_args()

    from coevolve.config import load_config
    from coevolve.evolution.warm_start import teacher_checkpoint

    settings = replace(TEACHER_BUILD, tasks=args.tasks, epochs=args.epochs, seed=args.seed)
    path = teacher_checkpoint(load_config(args.config), args.start, settings, args.root / "warm-start",
                              max_distractors=args.max_distractors)  # fmt: skip
    print(path)


if __name__ == "__main__":
    main()
