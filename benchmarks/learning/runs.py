"""Running the learning benchmark's plan: every arm through the real `coevolve` flow, in this process or
in `coevolve run` processes, each arm starting as a fork of the grpo run of its seed.

Round 0's baseline, rollout, update and evaluation do not depend on the data evolution, so they are
computed once per seed (by grpo) and copied into the other arms (`flows.fork`; their manifests say
`forked_from`). Re-running recomputes nothing that is complete: an interrupted benchmark continues.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from coevolve.benchmarks.learning.arms import (
    ARM_MEANINGS,
    ARMS,
    OWN_TEACHER_ARMS,
    TEACHERLESS_ARMS,
    Plan,
    run_overrides,
)
from coevolve.benchmarks.learning.report import report


def share_with_grpo(plan: Plan, root: Path, arm: str, seed: int) -> list[tuple[int, str]]:
    """Start a new run of `arm` as a fork of the grpo run of its seed (`flows.fork`): the stages its
    config computes identically (round 0's baseline, rollout, update and evaluation, as the data evolves
    from round 0 on) are copied, not computed again. The grpo run of a later seed forks seed 0's: the
    initial policy's baseline evaluation does not depend on the seed and is computed once. With a shared
    baseline (`Regime.shared_baseline`) an arm whose seed has no grpo run in this root forks the first seed's
    grpo run instead (its baseline). Returns the copied (round, stage) pairs; nothing when sharing is off,
    the run exists already or its source has not run yet."""
    from coevolve.storage.layout import RunLayout

    first = plan.run_name("grpo", plan.seed_base)
    source, target = plan.run_name("grpo", plan.seed_base if arm == "grpo" else seed), plan.run_name(arm, seed)
    if plan.experiment.shared_baseline and not RunLayout(root, source).config_path.exists():
        source = first
    if (source == target or not plan.share or RunLayout(root, target).rounds()
            or not RunLayout(root, source).config_path.exists()):  # fmt: skip
        return []
    from coevolve.config import load_config
    from coevolve.flows.fork import fork_run

    copied = fork_run(load_config(plan.config, run_overrides(plan, arm, seed)), root, source, target, plan.rounds)
    print(f"--- {target}: forked from {source}, {len(copied)} stages copied "
          f"({', '.join(f'{s}[{r}]' for r, s in copied) or 'none'})", flush=True)  # fmt: skip
    return copied


BASELINE_STAGES = ("bootstrap", "baseline")
"""Round 0's stages that the shared baseline run holds before any arm runs (the seed dataset, the evaluation)."""


def ensure_shared_baseline(plan: Plan, root: Path, carried: Path | None = None, record: Path | None = None) -> str:
    """The plan's one baseline (`Regime.shared_baseline`): round 0's `bootstrap` and `baseline` of the grpo run
    of the phase's first seed, which every run forks. Copied from the storage root `carried` when this root
    lacks it (a later sitting, another machine), else computed here, once: the record folder `record` notes
    it (`shared-baseline-<phase>.json`), and a later invocation that would compute it again is refused.
    Returns where it came from."""
    import shutil

    from coevolve.storage.layout import RunLayout

    name = plan.run_name("grpo", plan.seed_base)
    here = RunLayout(root, name)
    if (here.run_dir / "round=0" / "stage=baseline" / "_manifest.json").exists():
        return f"{name} in {root}"
    if carried is not None:
        there = RunLayout(carried, name)
        if not (there.run_dir / "round=0" / "stage=baseline" / "_manifest.json").exists():
            raise ValueError(f"--baseline-from {carried}: no baseline of run {name} there")
        if here.run_dir.exists():
            raise ValueError(f"{here.run_dir} exists without its baseline: carry the baseline into another root")
        here.run_dir.mkdir(parents=True)
        shutil.copy2(there.config_path, here.config_path)
        for stage in BASELINE_STAGES:
            if (there.run_dir / "round=0" / f"stage={stage}").exists():
                shutil.copytree(there.run_dir / "round=0" / f"stage={stage}", here.run_dir / "round=0" / f"stage={stage}")
        return f"{name} carried from {carried}"
    marker = None if record is None else record / f"shared-baseline-{plan.phase}.json"
    if marker is not None and marker.exists():
        raise ValueError(f"the plan's baseline was computed in an earlier sitting ({marker}); pass --baseline-from "
                         f"the storage root holding run {name}, so that it is not computed again")
    _compute_baseline(plan, root, name)
    if marker is not None:
        import json

        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"run": name, "phase": plan.phase, "stages": list(BASELINE_STAGES)}) + "\n")
    return f"{name} computed in {root}"


def _compute_baseline(plan: Plan, root: Path, name: str) -> None:
    from coevolve.config import load_config
    from coevolve.flows.run_context import open_run
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.round_plan import round_plan
    from coevolve.storage.parquet import write_text_atomic

    config = load_config(plan.config, run_overrides(plan, "grpo", plan.seed_base))
    ctx = open_run(config, name, root)
    write_text_atomic(config.to_yaml(), ctx.store.layout.config_path)
    for stage in round_plan(config, 0):
        if stage.name in (*BASELINE_STAGES, "warm-start"):
            run_stage(stage, ctx, 0)


def run_arms(plan: Plan, root: Path) -> dict[str, float]:
    """Run (or finish) every run of `plan` through the real flow; returns wall seconds per run. The runs
    report to the configured Prefect API, or to one temporary server that ends with this process
    (`flows.prefect_api`), never to servers Prefect would start and leave behind when it is killed."""
    from coevolve.flows.prefect_api import prefect_api

    with prefect_api():
        return run_arms_in_processes(plan, root) if plan.jobs > 1 else _run_arms_here(plan, root)


def _run_arms_here(plan: Plan, root: Path) -> dict[str, float]:
    from coevolve.flows.coevolve import coevolve

    seconds = {}
    for arm, seed in plan.runs():
        name = plan.run_name(arm, seed)
        print(f"--- {name}: {ARM_MEANINGS[arm]}; {plan.rounds} rounds, overrides {' '.join(ARMS[arm]) or '(none)'}",
              flush=True)
        started = time.perf_counter()
        overrides = run_overrides(plan, arm, seed)
        share_with_grpo(plan, root, arm, seed)
        if arm == "grpo" and plan.share and plan.rounds > 1:
            # round 0 first: the seed's other arms fork it while its checkpoint is still kept
            coevolve(str(plan.config), run=name, rounds=1, overrides=overrides)
            for other, other_seed in plan.runs():
                if other_seed == seed:
                    share_with_grpo(plan, root, other, seed)
        coevolve(str(plan.config), run=name, rounds=plan.rounds, overrides=overrides)
        seconds[name] = time.perf_counter() - started
    return seconds


def run_command(plan: Plan, arm: str, seed: int, root: Path) -> list[str]:
    """The `coevolve run` command line of one run."""
    sets = [arg for override in run_overrides(plan, arm, seed) for arg in ("--set", override)]
    return [sys.executable, "-m", "coevolve.cli", "run", str(plan.config), "--run", plan.run_name(arm, seed),
            "--rounds", str(plan.rounds), "--root", str(root), *sets]  # fmt: skip


def run_arms_in_processes(plan: Plan, root: Path) -> dict[str, float]:
    """`plan.jobs` runs at a time, each a `coevolve run` process with `cores // jobs` threads, its output
    in `<root>/learning-logs/<run>.log`, reporting to the Prefect API `run_arms` set in the environment;
    raises naming every run that failed (the others finish)."""
    logs = root / "learning-logs"
    logs.mkdir(parents=True, exist_ok=True)
    threads = str(max(1, (os.cpu_count() or 1) // plan.jobs))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    waiting, running, seconds, failed = list(plan.runs()), {}, {}, []
    while waiting or running:
        while waiting and len(running) < plan.jobs:
            arm, seed = waiting.pop(0)
            name = plan.run_name(arm, seed)
            log = logs / f"{name}.log"
            share_with_grpo(plan, root, arm, seed)  # when the grpo run of this seed has finished already
            print(f"--- {name}: {ARM_MEANINGS[arm]}; {plan.rounds} rounds, overrides "
                  f"{' '.join(ARMS[arm]) or '(none)'}, log {log}",
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


def prepare(plan: Plan, *, build: bool = True) -> tuple[Plan, Path]:
    """The plan with the starts every arm shares filled in (the warm-started policy as a `model.name`
    override, the evolving arms' teacher), and the storage root. `build=False`: only name the checkpoints
    (a report from stored runs), else build those not built yet. Raises ValueError for a plan the config
    cannot run."""
    from coevolve.config import load_config
    from coevolve.storage.layout import storage_root

    config = load_config(plan.config, list(plan.overrides))
    if config.evolve.every == 0 and set(plan.arms) - {"grpo"}:
        raise ValueError(
            f"{plan.config} sets evolve.every: 0; the evolving arms need F > 0 (--set evolve.every=1)"
        )
    root = storage_root(configured=config.storage.root)
    from coevolve.stages.warm_start.build import (
        teacher_checkpoint,
        teacher_key,
        warm_start_checkpoint,
        warm_start_key,
    )

    directory, start = root / "warm-start", config.model.name
    if plan.warm_start is not None:
        start = (warm_start_checkpoint(config, plan.warm_start, directory) if build
                 else directory / warm_start_key(config, plan.warm_start))  # fmt: skip
        plan = replace(plan, overrides=(*plan.overrides, f"model.name={start}"))
    if plan.teacher is not None and set(plan.arms) - {*TEACHERLESS_ARMS, *OWN_TEACHER_ARMS}:  # arms with the built teacher
        teacher = (teacher_checkpoint(config, start, plan.teacher, directory) if build
                   else directory / teacher_key(config, start, plan.teacher))  # fmt: skip
        plan = replace(plan, teacher_model=teacher)
    return plan, root


def run_benchmark(plan: Plan, out: Path, *, run: bool = True) -> str:
    """Run every arm of `plan` (`run=False`: only read the stored runs), write the outputs into `out`,
    return the report (markdown)."""
    plan, root = prepare(plan, build=run)
    if run and plan.experiment.shared_baseline:
        ensure_shared_baseline(plan, root, record=out)
    wall = run_arms(plan, root) if run else {}
    return report(root, plan, out, wall)
