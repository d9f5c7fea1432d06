"""The learning benchmark: CoEvolve against GRPO at equal rollout budget, with the paper's ablations.

    coevolve bench learning [--quick]        # = python -m coevolve.benchmarks.learning

`--quick`: grpo and coevolve only, one seed, 2 rounds, 8 tasks per eval split (the short check that the
whole benchmark works). The full suite: every arm, 3 seeds of grpo, oracle-curriculum and coevolve, the
config's `run.rounds` (8). The protocol (splits, regime, analysis, order of the runs) is
docs/experiments/learning-protocol.md.

Every arm is an ordinary run of the `coevolve` flow on the same config (`configs/learning-smollm2.yaml`
by default) with one set of overrides, the same seeds, the same evaluation (greedy, whole splits:
`validation` while developing, `test` and `heldout-templates` only with `--final` for a plan frozen with
`--freeze`) and the same rollout budget (tasks x K x rounds):

    grpo            evolve.every=0: GRPO on the static `train` split
    oracle-curriculum  not CoEvolve, the ceiling: fresh generator tasks of the families the signals mark
    coevolve        all three signals, verification on
    no-forgetting   one signal off each
    no-boundary
    no-rare
    no-verify       synthesized tasks admitted without environment verification
    unguided        exploration from random worlds, no signals (the paper's "random exploration")

Every arm starts from one warm-started checkpoint (`--warm-start-tasks`, default 48; 0 = the config's
model as is): SmolLM2-135M solves almost no tool-world task zero-shot, so no GRPO group would hold both
outcomes and no boundary or forgetting signal could fire. `rl/warm_start.py` fine-tunes it for 2 epochs
on reference solutions of fresh tasks of the training families (never a task of any split); the
checkpoint is built once under `<root>/warm-start/` and reused; both checkpoints are named by content
keys that leave the root out, so a copy of `<root>/warm-start/` serves another root.

The evolving arms share one teacher of their own (`--teacher-tasks`, default 48; 0 = the config's
teacher, which in the learning config is the policy): the warm start fine-tuned on the teacher's
abstraction and reflection replies for fresh training-family tasks (`stages.warm_start.build.teacher_checkpoint`,
built once under `<root>/warm-start/teacher-*`), run as `teacher.type: local`. The paper's teacher is a
strong LLM apart from the policy; a 135M policy acting as its own teacher writes too few well-posed tasks
for any to be admitted. grpo has no teacher.

`--jobs N` runs N runs at once, each a `coevolve run` process with the cores split between them (output
in `<root>/learning-logs/`): for machines with more cores than one small-model run can use.

Each arm's run starts as a fork of the grpo run of its seed (`flows/fork.py`; `--no-share` turns it off):
round 0's baseline, rollout, update and evaluation do not depend on the data evolution, so they are
computed once per seed and copied into the other arms (their manifests say `forked_from`; the report's
stage seconds count them in every arm, as the compute they stand for). The grpo run of a seed runs its
round 0 first and the seed's other arms fork it then, while its round-0 checkpoint still exists (runs
keep their last `train.keep_checkpoints`). With `--jobs`, an arm forks only what the grpo run of its
seed has finished when the arm starts.

Runs are named `learning-<arm>-s<seed>` under the storage root, so everything is in the DuckDB catalog
(`coevolve sql "SELECT run, round, split, avg(success::INT) FROM evals GROUP BY ALL"`). Re-running the
command recomputes nothing that is complete: an interrupted benchmark continues where it stopped.

Seeds add up across machines: `outcomes.parquet` in `--out` records every run's per-task held-out
outcomes with a fingerprint of the plan (config text, rounds, overrides, warm-start key, teacher
settings), so `--seeds 9 --first-seed 5` on a fresh machine runs seeds 5-8 and reports, and bootstraps,
over seeds 0-8: seeds 0-4 from the committed record, their per-run tables (signals, tokens, time, the
teacher's output, coverage, the gap's links) from `runs/` beside it (`run_record`).
Each row also names the stage code that computed it (`outcomes.code_version`: the `StageDef` versions):
a recorded run of the plan computed by other stage versions is refused rather than mixed in.

Outputs (in `--out`, default `<storage root>/learning-report/`, next to the runs: a committed record under
`benchmarks/results/learning/<record>/` is written only when `--out` names it): `outcomes.parquet` (run,
arm, seed, updates, split, task_id, family, success, plan, code), `runs/<table>.parquet` (the per-run tables,
each row with its plan's fingerprint), `curves.parquet` (arm, seed, updates, split, success,
tasks), `report.md` (final and best held-out success per arm, coevolve - grpo with a bootstrap 95 %
interval over seeds and task families, signals per kind, tasks accepted per round, generated tokens, wall time
per stage and the feedback phases' share, what the evolved data reaches that D_0 does not, and how one run
is rebuilt and scored on tasks of an unused environment seed with `coevolve eval`) and `curves.png`. The headline figures are appended to
`benchmarks/results/learning.jsonl` (`benchmarks.record`).

Modules: `plan` (which runs), `protocol` (freezing a plan for the final report), `runs` (running them
through the flow), `outcomes` (per-task held-out outcomes and their record), `statistics` (success per
arm, the bootstrap, the exact test, power), `tables` (per-run tables from storage), `run_record` (their record beside the outcomes), `coverage` (offered-but-
unused tools and compositions), `report` (report.md and curves), `cli` (the command line).
"""

from coevolve.benchmarks.learning.cli import main

__all__ = ["main"]
