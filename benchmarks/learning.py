"""The learning benchmark: CoEvolve against GRPO at equal rollout budget, with the paper's ablations.

    coevolve bench learning [--quick]        # = python -m benchmarks.learning

`--quick` (14 min 51 s on 2 cores once the warm start and the teacher are built, benchmarks/RESULTS.md):
grpo and coevolve only, one seed, 2 rounds, 8 tasks per eval split. The full suite: every arm, 3 seeds
of grpo and coevolve, the config's `run.rounds` (3).

Every arm is an ordinary run of the `coevolve` flow on the same config (`configs/learning-smollm2.yaml`
by default) with one set of overrides, the same seeds, the same evaluation (greedy, fixed task samples
of `test` and `heldout-templates`) and the same rollout budget (tasks x K x rounds):

    grpo            evolve.every=0: GRPO on the static `train` split
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
checkpoint is built once under `<root>/warm-start/` (about 6 minutes) and reused; both checkpoints are
named by content keys that leave the root out, so a copy of `<root>/warm-start/` serves another root.

The evolving arms share one teacher of their own (`--teacher-tasks`, default 48; 0 = the config's
teacher, which in the learning config is the policy): the warm start fine-tuned on the teacher's
abstraction and reflection replies for fresh training-family tasks (`stages.warm_start.teacher_checkpoint`,
built once under `<root>/warm-start/teacher-*`, about 21 minutes alone), run as `teacher.type: local`. The
paper's teacher is a strong LLM apart from the policy; with the policy as its own teacher, a 135M model
writes too few well-posed tasks for any to be admitted (benchmarks/RESULTS.md). grpo has no teacher.

`--jobs N` runs N runs at once, each a `coevolve run` process with the cores split between them (output
in `<root>/learning-logs/`). On 2 cores it hardly pays: two 1-thread coevolve runs took 1,845 s together,
about 0.92 of running them one after the other (benchmarks/RESULTS.md); it is meant for machines with
more cores than one small-model run can use.

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
over seeds 0-8: seeds 0-4 from the committed record, their per-run tables (signals, time) left out.

Outputs (in `--out`, default `benchmarks/learning/`): `outcomes.parquet` (run, arm, seed, updates, split,
task_id, success, plan), `curves.parquet` (arm, seed, updates, split, success, tasks), `report.md` (final
and best held-out success per arm, coevolve - grpo with a bootstrap 95 % interval over seeds and tasks,
signals per kind, tasks accepted per round, generated tokens, wall time per stage and the feedback
phases' share) and `curves.png`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from coevolve.rl.warm_start import WarmStart

ARMS: dict[str, tuple[str, ...]] = {
    "grpo": ("evolve.every=0",),
    "coevolve": (),
    "no-forgetting": ("signals.kinds=[boundary, rare]",),
    "no-boundary": ("signals.kinds=[forgetting, rare]",),
    "no-rare": ("signals.kinds=[forgetting, boundary]",),
    "no-verify": ("verify.enabled=false",),
    "unguided": ("explore.guided=false",),
}
QUICK_ARMS = ("grpo", "coevolve")
QUICK_OVERRIDES = ("eval.max_tasks=8",)
FEEDBACK_STAGES = ("signals", "explore", "triples", "abstract", "verify", "merge")
STAGE_ORDER = ("bootstrap", "baseline", "rollout", *FEEDBACK_STAGES, "grpo_update", "evaluate")
DEFAULT_CONFIG = Path("configs/learning-smollm2.yaml")
TEACHER_BUILD = WarmStart(seed=1, teacher=False)
"""Settings of the evolving arms' teacher build: tasks drawn with another seed than the policy's warm start."""


@dataclass(frozen=True)
class Plan:
    """Which runs the benchmark makes."""

    config: Path
    rounds: int
    seeds: int  # seeds of grpo and coevolve; the ablations run seed 0 only
    arms: tuple[str, ...]
    first_seed: int = 0
    """Run only seeds >= this; the report still covers seeds 0.., from storage or from the outcomes an
    earlier invocation of the same plan recorded in `outcomes.parquet` (a fresh machine adds seeds)."""
    overrides: tuple[str, ...] = ()
    warm_start: WarmStart | None = WarmStart()
    """Every arm starts from the config's policy fine-tuned on reference solutions (`rl.warm_start`)."""
    jobs: int = 1
    """Runs at once, each in its own `coevolve run` process with the cores split between them."""
    share: bool = True
    """Each arm starts as a fork of the grpo run of its seed (`share_with_grpo`)."""
    teacher: WarmStart | None = TEACHER_BUILD
    """The evolving arms' teacher (`teacher.type: local`): the warm start fine-tuned on the teacher's
    abstraction and reflection replies for these many fresh tasks (`stages.warm_start.teacher_checkpoint`);
    None: the config's teacher."""
    teacher_model: Path | None = None
    """The teacher checkpoint, once `run_benchmark` has it."""

    @classmethod
    def make(cls, *, quick: bool, config: Path = DEFAULT_CONFIG, rounds: int | None = None,
             seeds: int | None = None, arms: Sequence[str] | None = None,
             overrides: Sequence[str] = (), warm_start_tasks: int = WarmStart.tasks,
             teacher_tasks: int = WarmStart.tasks, jobs: int = 1, share: bool = True,
             first_seed: int = 0) -> Plan:  # fmt: skip
        """The full suite, or `quick`: grpo and coevolve, one seed, 2 rounds, 8 tasks per eval split."""
        unknown = sorted(set(arms or ()) - set(ARMS))
        if unknown:
            raise ValueError(f"unknown arms {unknown}; known: {', '.join(ARMS)}")
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        seeds = seeds if seeds is not None else (1 if quick else 3)
        if not 0 <= first_seed < seeds:
            raise ValueError(f"first_seed must be in [0, seeds = {seeds}), got {first_seed}")
        return cls(
            config=config,
            rounds=rounds if rounds is not None else (2 if quick else _config_rounds(config)),
            seeds=seeds,
            arms=tuple(arms) if arms else (QUICK_ARMS if quick else tuple(ARMS)),
            first_seed=first_seed,
            overrides=(*QUICK_OVERRIDES, *overrides) if quick else tuple(overrides),
            warm_start=WarmStart(tasks=warm_start_tasks) if warm_start_tasks else None,
            teacher=replace(TEACHER_BUILD, tasks=teacher_tasks) if teacher_tasks else None,
            jobs=jobs,
            share=share,
        )

    def reported_runs(self) -> list[tuple[str, int]]:
        """(arm, seed) pairs, seed by seed so that an early stop still has every arm of seed 0, grpo first
        so that the other arms of the seed can fork it."""
        return [
            (arm, seed)
            for seed in range(self.seeds)
            for arm in sorted(self.arms, key=list(ARMS).index)
            if seed == 0 or arm in ("grpo", "coevolve")
        ]

    def runs(self) -> list[tuple[str, int]]:
        """The (arm, seed) pairs this invocation runs: those of seeds >= `first_seed`."""
        return [(arm, seed) for arm, seed in self.reported_runs() if seed >= self.first_seed]


def _config_rounds(config: Path) -> int:
    from coevolve.config import load_config

    return load_config(config).run.rounds


def run_name(arm: str, seed: int) -> str:
    return f"learning-{arm}-s{seed}"


def run_overrides(plan: Plan, arm: str, seed: int) -> list[str]:
    teacher = [] if arm == "grpo" or plan.teacher_model is None else [
        "teacher.type=local", f"teacher.model={plan.teacher_model}"]  # fmt: skip
    return [f"run.seed={seed}", *plan.overrides, *ARMS[arm], *teacher]


def share_with_grpo(plan: Plan, root: Path, arm: str, seed: int) -> list[tuple[int, str]]:
    """Start a new run of `arm` as a fork of the grpo run of its seed (`flows.fork`): the stages its
    config computes identically (round 0's baseline, rollout, update and evaluation, as the data evolves
    from round 0 on) are copied, not computed again. Returns the copied (round, stage) pairs; nothing when
    sharing is off, the run exists already or the grpo run has not run yet."""
    from coevolve.storage.layout import RunLayout

    source, target = run_name("grpo", seed), run_name(arm, seed)
    if (arm == "grpo" or not plan.share or RunLayout(root, target).rounds()
            or not RunLayout(root, source).config_path.exists()):  # fmt: skip
        return []
    from coevolve.config import load_config
    from coevolve.flows.fork import fork_run

    copied = fork_run(load_config(plan.config, run_overrides(plan, arm, seed)), root, source, target, plan.rounds)
    print(f"--- {target}: forked from {source}, {len(copied)} stages copied "
          f"({', '.join(f'{s}[{r}]' for r, s in copied) or 'none'})", flush=True)  # fmt: skip
    return copied


def run_arms(plan: Plan, root: Path) -> dict[str, float]:
    """Run (or finish) every run of `plan` through the real flow; returns wall seconds per run."""
    if plan.jobs > 1:
        return run_arms_in_processes(plan, root)
    from coevolve.flows.coevolve import coevolve

    seconds = {}
    for arm, seed in plan.runs():
        name = run_name(arm, seed)
        print(f"--- {name}: {plan.rounds} rounds, overrides {' '.join(ARMS[arm]) or '(none)'}", flush=True)
        started = time.perf_counter()
        overrides = run_overrides(plan, arm, seed)
        if arm == "grpo" and plan.share and plan.rounds > 1:
            # round 0 first: the seed's other arms fork it while its checkpoint is still kept
            coevolve(str(plan.config), run=name, rounds=1, overrides=overrides)
            for other, other_seed in plan.runs():
                if other_seed == seed:
                    share_with_grpo(plan, root, other, seed)
        share_with_grpo(plan, root, arm, seed)
        coevolve(str(plan.config), run=name, rounds=plan.rounds, overrides=overrides)
        seconds[name] = time.perf_counter() - started
    return seconds


def run_command(plan: Plan, arm: str, seed: int, root: Path) -> list[str]:
    """The `coevolve run` command line of one run."""
    sets = [arg for override in run_overrides(plan, arm, seed) for arg in ("--set", override)]
    return [sys.executable, "-m", "coevolve.flows.cli", "run", str(plan.config), "--run", run_name(arm, seed),
            "--rounds", str(plan.rounds), "--root", str(root), *sets]  # fmt: skip


def run_arms_in_processes(plan: Plan, root: Path) -> dict[str, float]:
    """`plan.jobs` runs at a time, each a `coevolve run` process with `cores // jobs` threads, its output
    in `<root>/learning-logs/<run>.log`, reporting to this process's Prefect API when one is set (else
    each starts an ephemeral one); raises naming every run that failed (the others finish)."""
    logs = root / "learning-logs"
    logs.mkdir(parents=True, exist_ok=True)
    threads = str(max(1, (os.cpu_count() or 1) // plan.jobs))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():  # the runs report to this process's Prefect API, else each starts its own
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    waiting, running, seconds, failed = list(plan.runs()), {}, {}, []
    while waiting or running:
        while waiting and len(running) < plan.jobs:
            arm, seed = waiting.pop(0)
            name = run_name(arm, seed)
            log = logs / f"{name}.log"
            share_with_grpo(plan, root, arm, seed)  # when the grpo run of this seed has finished already
            print(f"--- {name}: {plan.rounds} rounds, overrides {' '.join(ARMS[arm]) or '(none)'}, log {log}",
                  flush=True)  # fmt: skip
            with log.open("w") as out:
                process = subprocess.Popen(run_command(plan, arm, seed, root), stdout=out,
                                           stderr=subprocess.STDOUT, env=env)  # fmt: skip
            running[name] = (process, time.perf_counter(), log)
        time.sleep(2)
        for name, (process, started, log) in list(running.items()):
            if process.poll() is not None:
                del running[name]
                seconds[name] = time.perf_counter() - started
                print(f"--- {name}: {'done' if process.returncode == 0 else 'FAILED'} after "
                      f"{seconds[name]:.0f} s", flush=True)  # fmt: skip
                if process.returncode != 0:
                    failed.append(f"{name} (exit {process.returncode}, log {log})")
    if failed:
        raise RuntimeError(f"runs failed: {'; '.join(failed)}")
    return seconds


# --- collecting ----------------------------------------------------------------------------------


def _sql(root: Path, sql: str) -> pl.DataFrame:
    from coevolve.storage.catalog import query

    return pl.from_arrow(query(root, sql))


def _scalar_table(root: Path, names: Sequence[str], sql: str, fallback: dict[str, type]) -> pl.DataFrame:
    import duckdb

    if not names:
        return pl.DataFrame(schema=fallback)
    try:
        return _sql(root, sql.replace("RUNS", ", ".join(f"'{n}'" for n in names)))
    except duckdb.CatalogException:  # the view does not exist: no run of the benchmark produced it
        return pl.DataFrame(schema=fallback)


def per_task_evals(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """One row per (run, updates, split, task): `updates` = 0 for the baseline, r + 1 after round r."""
    frame = _scalar_table(root, names, """
        SELECT run, CASE WHEN stage = 'baseline' THEN 0 ELSE round + 1 END AS updates, split, task_id,
               success::INT AS success
        FROM evals WHERE run IN (RUNS)""",
        {"run": pl.String, "updates": pl.Int64, "split": pl.String, "task_id": pl.String,
         "success": pl.Int32})  # fmt: skip
    return frame.with_columns(
        arm=pl.col("run").str.extract(r"^learning-(.+)-s\d+$", 1),
        seed=pl.col("run").str.extract(r"-s(\d+)$", 1).cast(pl.Int64),
    )


OUTCOMES = "outcomes.parquet"
OUTCOME_SCHEMA = {"run": pl.String, "arm": pl.String, "seed": pl.Int64, "updates": pl.Int64, "split": pl.String,
                  "task_id": pl.String, "success": pl.Int64, "plan": pl.String}  # fmt: skip
"""`<out>/outcomes.parquet`: one row per (run, updates, split, task), `plan` the `plan_fingerprint` of the
invocation that measured it. Committed with the report, it lets a later invocation on a fresh machine add
seeds (`first_seed`) and still report, and bootstrap, over every seed."""


def plan_fingerprint(plan: Plan, root: Path) -> str:
    """What makes two invocations' outcomes one experiment: the config file's text, the rounds, the
    overrides (the storage root left out of the warm start's path: its directory name is a content key,
    the same on every machine) and the settings the teacher was built with."""
    import hashlib
    from dataclasses import asdict

    parts = {"config": plan.config.read_text(), "rounds": plan.rounds,
             "overrides": [o.replace(str(root), "<root>") for o in plan.overrides],
             "teacher": asdict(plan.teacher) if plan.teacher and plan.teacher_model else None}  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def recorded_outcomes(path: Path) -> pl.DataFrame:
    """The outcomes an earlier invocation wrote to `path` (none when there is no file); a file that is not
    such a table raises naming it."""
    if not path.exists():
        return pl.DataFrame(schema=OUTCOME_SCHEMA)
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # polars raises several kinds for a corrupt or foreign file
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from exc
    missing = sorted(set(OUTCOME_SCHEMA) - set(frame.columns))
    if missing:
        raise ValueError(f"{path}: not an outcomes table, missing columns {missing}")
    return frame.select(list(OUTCOME_SCHEMA)).cast(OUTCOME_SCHEMA)


def merge_outcomes(stored: pl.DataFrame, recorded: pl.DataFrame, names: Sequence[str],
                   fingerprint: str) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """The outcomes to report on (the stored evals of `names`, and the recorded ones of this plan for
    those of `names` with none stored) and the table to record (the reported ones and every other
    recorded row: nothing recorded is lost, a stored run replaces its recorded rows)."""
    stored = stored.with_columns(plan=pl.lit(fingerprint)).select(list(OUTCOME_SCHEMA)).cast(OUTCOME_SCHEMA)
    have = set(stored["run"])
    mine = (pl.col("plan") == fingerprint) & pl.col("run").is_in(list(names))
    from_record = recorded.filter(mine & ~pl.col("run").is_in(list(have)))
    kept = recorded.filter(~(mine & pl.col("run").is_in(list(have))))
    return pl.concat([stored, from_record]), pl.concat([stored, kept]).sort("run", "updates", "split", "task_id")


def curves(evals: pl.DataFrame) -> pl.DataFrame:
    return (
        evals.group_by("arm", "seed", "updates", "split")
        .agg(success=pl.col("success").mean(), tasks=pl.len())
        .sort("arm", "seed", "split", "updates")
    )


def bootstrap_difference(
    evals: pl.DataFrame, a: str, b: str, *, updates: int, iterations: int = 2000, seed: int = 0
) -> tuple[float, float, float] | None:
    """Mean held-out success of arm `a` minus arm `b` after `updates` updates, with a 95 % percentile
    interval from resampling seeds and tasks with replacement. Tasks are shared by both arms; so are
    seeds when both arms ran the same seeds (a seed fixes the task draws and the sampling RNG of both,
    so the comparison is paired: common random numbers), else each arm's seeds are drawn on their own."""
    final = evals.filter(pl.col("updates") == updates)
    table: dict[tuple[str, int], dict[str, int]] = {}
    for row in final.iter_rows(named=True):
        table.setdefault((row["arm"], row["seed"]), {})[f"{row['split']}/{row['task_id']}"] = row["success"]
    seeds = {arm: sorted(s for (x, s) in table if x == arm) for arm in (a, b)}
    if not seeds[a] or not seeds[b]:
        return None
    tasks = sorted(set.intersection(*(set(v) for v in table.values())))
    if not tasks:
        return None

    def mean(arm: str, seed_draw: list[int], task_draw: list[str]) -> float:
        return sum(table[(arm, s)][t] for s in seed_draw for t in task_draw) / (
            len(seed_draw) * len(task_draw)
        )

    point = mean(a, seeds[a], tasks) - mean(b, seeds[b], tasks)
    rng = random.Random(seed)
    draws = []
    for _ in range(iterations):
        task_draw = rng.choices(tasks, k=len(tasks))
        seed_a = rng.choices(seeds[a], k=len(seeds[a]))
        seed_b = seed_a if seeds[a] == seeds[b] else rng.choices(seeds[b], k=len(seeds[b]))
        draws.append(mean(a, seed_a, task_draw) - mean(b, seed_b, task_draw))
    draws.sort()
    return point, draws[int(0.025 * iterations)], draws[int(0.975 * iterations) - 1]


def stage_seconds(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Wall seconds per (run, stage) from the stage manifests (a stage copied by a fork counts what it
    took to compute in its source run), and how many of the stage's rounds were copied (`forked`)."""
    rows = []
    for name in names:
        for path in (root / f"run={name}").glob("round=*/stage=*/_manifest.json"):
            manifest = json.loads(path.read_text())
            rows.append({"run": name, "stage": manifest["stage"], "seconds": float(manifest["seconds"]),
                         "forked": int(bool(manifest.get("forked_from")))})  # fmt: skip
    schema = {"run": pl.String, "stage": pl.String, "seconds": pl.Float64, "forked": pl.Int64}
    return pl.DataFrame(rows, schema=schema).group_by("run", "stage").agg(pl.col("seconds", "forked").sum())


def evolution_counts(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run: signals fired per kind, synthesized tasks accepted/retained, rollout episodes on them
    (`synth_rollouts`: what the policy actually trained on), `revisited` tasks (drawn for rollouts in two
    or more rounds: the only tasks the forgetting signal can fire on), generated tokens."""
    signals = _scalar_table(root, names, """
        SELECT run, kind, count(*) AS n FROM signals WHERE run IN (RUNS) GROUP BY ALL""",
        {"run": pl.String, "kind": pl.String, "n": pl.Int64})  # fmt: skip
    verdicts = _scalar_table(root, names, """
        SELECT run, round, outcome, count(*) AS n FROM verifications WHERE run IN (RUNS) GROUP BY ALL""",
        {"run": pl.String, "round": pl.Int64, "outcome": pl.String, "n": pl.Int64})  # fmt: skip
    tokens = _scalar_table(root, names, """
        SELECT run, source, sum(completion_tokens) AS tokens FROM trajectories WHERE run IN (RUNS)
        GROUP BY ALL""", {"run": pl.String, "source": pl.String, "tokens": pl.Int64})  # fmt: skip
    drawn = _scalar_table(root, names, """
        SELECT run, count(*) AS synth_rollouts FROM trajectories t WHERE run IN (RUNS) AND source = 'rollout'
        AND task_id IN (SELECT task_id FROM verifications v WHERE v.run = t.run
                        AND outcome IN ('accept', 'retain')) GROUP BY ALL""",
        {"run": pl.String, "synth_rollouts": pl.Int64})  # fmt: skip
    revisited = _scalar_table(root, names, """
        SELECT run, count(*) AS revisited FROM (
            SELECT run, task_id FROM trajectories WHERE run IN (RUNS) AND source = 'rollout'
            GROUP BY ALL HAVING count(DISTINCT round) > 1) GROUP BY ALL""",
        {"run": pl.String, "revisited": pl.Int64})  # fmt: skip
    base = pl.DataFrame({"run": list(names)}, schema={"run": pl.String})
    kinds = signals.pivot(on="kind", index="run", values="n") if signals.height else base
    admitted = (
        verdicts.filter(pl.col("outcome").is_in(["accept", "retain"]))
        .group_by("run")
        .agg(admitted=pl.col("n").sum())
    )
    token_cols = tokens.pivot(on="source", index="run", values="tokens") if tokens.height else base
    token_cols = token_cols.rename({c: f"{c}_tokens" for c in token_cols.columns if c != "run"})
    out = base.join(kinds, on="run", how="left").join(admitted, on="run", how="left")
    out = out.join(drawn, on="run", how="left").join(revisited, on="run", how="left")
    return out.join(token_cols, on="run", how="left").fill_null(0)


def teacher_output(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run: the teacher's candidates by status, then the verdicts on the `ok` ones and on the
    duplicates verification checked in place of a discarded one (`stand_ins`, `stages.verify.sibling_duplicates`):
    is the teacher the bottleneck, or verification?"""
    return _scalar_table(root, names, """
        SELECT c.run, count(*) AS candidates, count(*) FILTER (c.status = 'ok') AS ok,
               count(*) FILTER (c.status = 'unparsable') AS unparsable,
               count(*) FILTER (c.status = 'invalid') AS invalid,
               count(*) FILTER (c.status = 'duplicate') AS duplicate,
               count(*) FILTER (c.status = 'duplicate' AND v.outcome IS NOT NULL) AS stand_ins,
               count(*) FILTER (v.outcome IN ('accept', 'retain')) AS admitted,
               count(*) FILTER (v.outcome = 'discard') AS discarded
        FROM candidates c LEFT JOIN verifications v USING (run, round, candidate_id)
        WHERE c.run IN (RUNS) GROUP BY ALL ORDER BY c.run""",
        {"run": pl.String, "candidates": pl.Int64})  # fmt: skip


def exploration_breadth(root: Path, names: Sequence[str]) -> pl.DataFrame:
    """Per run: exploration groups, the distinct calls that ran in them (`calls`), and how many of those are
    no call of the explored task's reference solution (`new_calls`). An exploration that only repeats the
    task's solution gives the abstraction nothing but that task again."""
    from coevolve.core import ToolCall

    triples = _scalar_table(root, names, """
        SELECT DISTINCT run, group_id, task_id, tool, arguments FROM triples WHERE run IN (RUNS) AND ok""",
        {"run": pl.String, "group_id": pl.String, "task_id": pl.String, "tool": pl.String,
         "arguments": pl.String})  # fmt: skip
    tasks = _scalar_table(root, names, """
        SELECT DISTINCT task_id, solution FROM tasks WHERE run IN (RUNS)
        AND task_id IN (SELECT task_id FROM triples WHERE run IN (RUNS))""",
        {"task_id": pl.String, "solution": pl.String})  # fmt: skip
    reference = {row["task_id"]: {ToolCall(**c).signature() for turn in json.loads(row["solution"] or "[]")
                                  for c in turn} for row in tasks.to_dicts()}  # fmt: skip
    calls = {}
    for row in triples.to_dicts():
        call = ToolCall(name=row["tool"], arguments=json.loads(row["arguments"])).signature()
        calls[(row["run"], row["group_id"], call)] = call not in reference.get(row["task_id"], set())
    rows = [{"run": run, "group_id": group, "new": new} for (run, group, _), new in calls.items()]
    frame = pl.DataFrame(rows, schema={"run": pl.String, "group_id": pl.String, "new": pl.Boolean})
    return frame.group_by("run").agg(groups=pl.col("group_id").n_unique(), calls=pl.len(),
                                     new_calls=pl.col("new").sum().cast(pl.Int64)).sort("run")  # fmt: skip


def rejection_reasons(root: Path, names: Sequence[str], top: int = 12) -> pl.DataFrame:
    """The most frequent reasons a candidate was not `ok` or a verified one was discarded, over all runs,
    with quoted JSON, ids and numbers folded (`solution item N is neither ...`)."""
    folded = (r"regexp_replace(regexp_replace(regexp_replace(coalesce(reason, ''), '\{.*\}|\[.*\]', '{…}', 'g'), "
              r"'\b[0-9a-f]{12,}\b', '<id>', 'g'), '[0-9]+(\.[0-9]+)?', 'N', 'g')")
    return _scalar_table(root, names, f"""
        WITH reasons AS (
            SELECT 'candidate ' || status AS verdict, reason FROM candidates WHERE run IN (RUNS) AND status <> 'ok'
            UNION ALL
            SELECT 'verification ' || outcome, reason FROM verifications WHERE run IN (RUNS) AND outcome = 'discard')
        SELECT verdict, {folded} AS reason, count(*) AS n
        FROM reasons GROUP BY ALL ORDER BY n DESC, verdict, reason LIMIT {top}""",
        {"verdict": pl.String, "reason": pl.String, "n": pl.Int64})  # fmt: skip


def accepted_per_round(root: Path, names: Sequence[str]) -> pl.DataFrame:
    return _scalar_table(root, names, """
        SELECT run, round, count(*) FILTER (outcome IN ('accept', 'retain')) AS admitted, count(*) AS verified
        FROM verifications WHERE run IN (RUNS) GROUP BY ALL ORDER BY run, round""",
        {"run": pl.String, "round": pl.Int64, "admitted": pl.Int64, "verified": pl.Int64})  # fmt: skip


# --- reporting -----------------------------------------------------------------------------------


def summary(curve: pl.DataFrame, final_updates: int) -> pl.DataFrame:
    """Per arm and split: final and best success (means over seeds), and the zero-shot baseline."""
    over_seeds = curve.group_by("arm", "split", "updates").agg(
        success=pl.col("success").mean(), seeds=pl.len()
    )
    return (
        over_seeds.group_by("arm", "split")
        .agg(
            baseline=pl.col("success").filter(pl.col("updates") == 0).first(),
            final=pl.col("success").filter(pl.col("updates") == final_updates).first(),
            best=pl.col("success").filter(pl.col("updates") > 0).max(),
            seeds=pl.col("seeds").max(),
        )
        .sort("split", "arm")
    )


def markdown_table(frame: pl.DataFrame, percent: Sequence[str] = ()) -> str:
    def cell(column: str, value: object) -> str:
        if value is None:
            return "-"
        if column in percent:
            return f"{100 * float(value):.1f} %"
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(frame.columns, row, strict=True)) + " |"
              for row in frame.iter_rows()]  # fmt: skip
    return "\n".join(lines)


def plot(curve: pl.DataFrame, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no curves.png")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = sorted(curve["split"].unique())
    fig, axes = plt.subplots(1, len(splits), figsize=(5.5 * len(splits), 4), squeeze=False)
    mean = curve.group_by("arm", "split", "updates").agg(pl.col("success").mean()).sort("updates")
    seeds = dict(curve.group_by("arm").agg(pl.col("seed").unique().sort()).iter_rows())
    for ax, split in zip(axes[0], splits, strict=True):
        for arm in [a for a in ARMS if a in set(mean["arm"])]:
            rows = mean.filter((pl.col("arm") == arm) & (pl.col("split") == split))
            style = "-" if arm in ("grpo", "coevolve") else ":"
            label = f"{arm} (seed {seeds[arm][0]})" if len(seeds[arm]) == 1 else f"{arm} (mean of {len(seeds[arm])} seeds)"
            ax.plot(rows["updates"], 100 * rows["success"], style, marker="o", label=label)
        ax.set(title=f"held-out success: {split}", xlabel="GRPO updates", ylabel="success (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def stage_table(seconds: pl.DataFrame) -> pl.DataFrame:
    wide = seconds.pivot(on="stage", index="run", values="seconds").sort("run")
    return wide.select("run", *[s for s in STAGE_ORDER if s in wide.columns])


def _warm_start_line(plan: Plan) -> str:
    if plan.warm_start is None:
        line = "No warm start: every arm starts from the config's model."
    else:
        ws = plan.warm_start
        teacher = f" and {ws.tasks} teacher abstraction examples" if ws.teacher else ""
        line = (f"Every arm starts from the same checkpoint, warm start: {ws.tasks} reference episodes{teacher} of "
                f"the training families (disjoint from every split), {ws.epochs} epochs, lr {ws.lr} (rl/warm_start.py).")  # fmt: skip
    if plan.teacher_model is None:
        return line + " The evolving arms' teacher is the config's."
    return (line + f" The evolving arms' teacher (`teacher.type: local`) is `{plan.teacher_model}`: that checkpoint "
            f"fine-tuned on {plan.teacher.tasks} abstraction and {plan.teacher.tasks} reflection replies, and an "
            f"exploration episode for each of them that lists a variant, for fresh training-family tasks "
            f"(stages/warm_start.py).")  # fmt: skip


def describe_runs(runs: Sequence[str]) -> str:
    """Run names of this benchmark as arms with seed ranges, e.g. `grpo s0-9, 13; coevolve s0-9`."""
    seeds: dict[str, list[int]] = {}
    for name in runs:
        arm, _, seed = name.removeprefix("learning-").rpartition("-s")
        seeds.setdefault(arm, []).append(int(seed))
    return "; ".join(f"{arm} s{seed_ranges(numbers)}" for arm, numbers in seeds.items())


def seed_ranges(seeds: Sequence[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2, 5`."""
    spans: list[list[int]] = []
    for seed in sorted(set(seeds)):
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _provenance_lines(from_record: Sequence[str], missing: Sequence[str], out: Path) -> list[str]:
    lines = []
    if from_record:
        lines += [f"Held-out outcomes of {describe_runs(from_record)} come from `{out / OUTCOMES}`, recorded by "
                  "an earlier invocation of this plan: those runs are not in this storage root, so the per-run "
                  "tables below leave them out.", ""]  # fmt: skip
    if missing:
        lines += [f"No held-out outcomes of this plan yet for {describe_runs(missing)}: the tables leave them out.",
                  ""]  # fmt: skip
    return lines


def report(root: Path, plan: Plan, out: Path, wall: dict[str, float]) -> str:
    planned = [run_name(arm, seed) for arm, seed in plan.reported_runs()]
    evals, record = merge_outcomes(per_task_evals(root, planned), recorded_outcomes(out / OUTCOMES), planned,
                                   plan_fingerprint(plan, root))  # fmt: skip
    names = [n for n in planned if (root / f"run={n}").exists()]  # the runs the tables below read
    from_record = sorted(set(evals["run"]) - set(names), key=planned.index)
    missing = [n for n in planned if n not in set(evals["run"])]
    curve = curves(evals)
    out.mkdir(parents=True, exist_ok=True)
    from coevolve.storage.parquet import write_table, write_text_atomic

    write_table(record.to_arrow(), out / OUTCOMES)  # the only copy of runs whose storage is gone: atomic
    write_table(curve.to_arrow(), out / "curves.parquet")
    plot(curve, out / "curves.png")
    final = plan.rounds
    parts = [f"# Learning benchmark ({time.strftime('%Y-%m-%d')})", "",
             f"config `{plan.config}`, {plan.rounds} rounds, planned runs {describe_runs(planned)}, "
             f"overrides {' '.join(plan.overrides) or '(none)'}", "", _warm_start_line(plan), "",
             *_provenance_lines(from_record, missing, out),
             "## Held-out success per arm (mean over seeds)", "",
             markdown_table(summary(curve, final), percent=("baseline", "final", "best")), ""]  # fmt: skip
    parts += ["## coevolve - grpo after the last update (bootstrap 95 % interval over seeds and tasks)", ""]
    for split in sorted(evals["split"].unique()):
        got = bootstrap_difference(evals.filter(pl.col("split") == split), "coevolve", "grpo", updates=final)
        parts.append(f"- {split}: " + ("n/a" if got is None else
                     f"{100 * got[0]:+.1f} points [{100 * got[1]:+.1f}, {100 * got[2]:+.1f}]"))  # fmt: skip
    got = bootstrap_difference(evals, "coevolve", "grpo", updates=final)
    if got is not None:
        parts.append(f"- both splits: {100 * got[0]:+.1f} points [{100 * got[1]:+.1f}, {100 * got[2]:+.1f}]")
    seconds = stage_seconds(root, names)
    feedback = (
        seconds.with_columns(feedback=pl.col("stage").is_in(FEEDBACK_STAGES))
        .group_by("run")
        .agg(stages_s=pl.col("seconds").sum(), feedback_s=pl.col("seconds").filter(pl.col("feedback")).sum(),
             forked_stages=pl.col("forked").sum())
    )
    per_run = (
        evolution_counts(root, names)
        .join(feedback, on="run", how="left")
        .with_columns(
            feedback_share=pl.col("feedback_s") / pl.col("stages_s"),
            wall_s=pl.col("run").replace_strict(wall, default=None, return_dtype=pl.Float64),
        )
    )
    parts += ["", "## Per run: signals, admitted tasks, generated tokens, time", "",
              markdown_table(per_run.sort("run"), percent=("feedback_share",)), "",
              "`revisited`: tasks drawn for rollouts in two or more rounds, the only ones the forgetting signal "
              "can fire on. `stages_s`: the stages' own seconds, round 0's counted in every arm that forked it; "
              "`wall_s`: what this invocation spent on the run (a few seconds for a run finished by an earlier "
              "one).", "",
              "## Wall seconds per stage (sum over rounds)", "",
              markdown_table(stage_table(seconds)), "",
              "## Synthesized tasks admitted per round", "",
              markdown_table(accepted_per_round(root, names)), "",
              "## The teacher's explorations, its candidates and their verdicts", "",
              "Distinct calls that ran in the exploration groups, and those that are no call of the explored "
              "task's reference solution:", "",
              markdown_table(exploration_breadth(root, names)), "",
              markdown_table(teacher_output(root, names)), "",
              "Most frequent reasons a candidate was not `ok` or was discarded (JSON, ids and numbers folded):", "",
              markdown_table(rejection_reasons(root, names)), ""]  # fmt: skip
    text = "\n".join(parts)
    write_text_atomic(text, out / "report.md")
    return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="grpo and coevolve, one seed, 2 rounds, 8 eval tasks per split")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seeds", type=int, help="seeds of grpo and coevolve (ablations: seed 0)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="run only seeds >= this; the report still covers seeds 0.. (from storage, or from "
                             "the outcomes.parquet an earlier invocation of the same plan wrote to --out)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    parser.add_argument("--warm-start-tasks", type=int, default=WarmStart.tasks,
                        help="reference episodes of the supervised warm start every arm starts from (0: none)")
    parser.add_argument("--teacher-tasks", type=int, default=WarmStart.tasks,
                        help="tasks of the evolving arms' own teacher build (abstraction and reflection replies "
                             "each; 0: the config's teacher)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each in its own process with the cores split between them")
    parser.add_argument("--no-share", dest="share", action="store_false",
                        help="compute every stage of every arm (default: arms fork the grpo run of their seed)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the stored runs without running anything")
    parser.add_argument("--root", type=Path, help="storage root (default: COEVOLVE_HOME or runs/)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/learning"))
    args = parser.parse_args(argv)
    from coevolve.flows.cli import quiet_libraries

    quiet_libraries()  # as `coevolve bench learning`: without it, Prefect's telemetry heartbeat competed for its database
    if args.root is not None:
        os.environ["COEVOLVE_HOME"] = str(args.root)
    plan = Plan.make(quick=args.quick, config=args.config, rounds=args.rounds, seeds=args.seeds,
                     arms=args.arms, overrides=args.overrides,
                     warm_start_tasks=args.warm_start_tasks, teacher_tasks=args.teacher_tasks, jobs=args.jobs,
                     share=args.share, first_seed=args.first_seed)  # fmt: skip
    print(run_benchmark(plan, args.out, run=not args.report_only))


def run_benchmark(plan: Plan, out: Path, *, run: bool = True) -> str:
    """Run every arm of `plan` (`run=False`: only read the stored runs), write the outputs into `out`,
    return the report (markdown)."""
    from coevolve.config import load_config
    from coevolve.storage.layout import storage_root

    config = load_config(plan.config, list(plan.overrides))
    if config.evolve.every == 0 and set(plan.arms) - {"grpo"}:
        raise ValueError(
            f"{plan.config} sets evolve.every: 0; the evolving arms need F > 0 (--set evolve.every=1)"
        )
    root = storage_root(configured=config.storage.root)
    from coevolve.evolution.warm_start import (
        teacher_checkpoint,
        teacher_key,
        warm_start_checkpoint,
        warm_start_key,
    )

    directory, start = root / "warm-start", config.model.name
    if plan.warm_start is not None:
        start = (warm_start_checkpoint(config, plan.warm_start, directory) if run
                 else directory / warm_start_key(config, plan.warm_start))  # fmt: skip
        plan = replace(plan, overrides=(*plan.overrides, f"model.name={start}"))
    if plan.teacher is not None and set(plan.arms) - {"grpo"}:
        teacher = (teacher_checkpoint(config, start, plan.teacher, directory) if run
                   else directory / teacher_key(config, start, plan.teacher))  # fmt: skip
        plan = replace(plan, teacher_model=teacher)
    wall = run_arms(plan, root) if run else {}
    return report(root, plan, out, wall)


if __name__ == "__main__":
    main()
