"""The coverage regime's first step: which candidate gap families the warm start leaves to learn.

A family the warm start already solves is no gap, and one where it never earns any reward gives GRPO no
gradient even with perfect data. So, once, before any arm runs: the shared warm start plays every candidate
family's `gap-validation` tasks `SAMPLES` times at the rollout temperature (the real `baseline` stage of a run
`<prefix>-gap-families`, so every episode can be read with SQL), and each family is judged by `RULE`:

    success <= 0.10   and   reward varies between a task's samples on at least half its tasks

The families that pass are the gap (`env.options.gap_families` of the coverage config, fixed by hand from
`gap-families.md`, as the protocol says); the measurement is never repeated on test.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.arms import Plan

SAMPLES = 4
MAX_SUCCESS = 0.10
MIN_SPREAD_SHARE = 0.5
RULE = (f"gap: success <= {MAX_SUCCESS:.2f} and the reward varies between a task's {SAMPLES} samples on at least "
        f"{MIN_SPREAD_SHARE:.0%} of its tasks")  # fmt: skip


def measure_gap_families(plan: Plan, out: Path) -> str:
    """Run the measurement (the `baseline` stage, cached like any stage), write `gap-families.parquet` and `gap-families.md`
    into `out`, return the markdown."""
    from coevolve.benchmarks.learning.runs import prepare
    from coevolve.config import load_config
    from coevolve.envs.toolworld.families_gap import CANDIDATES
    from coevolve.flows.run_context import open_run
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.baseline.stage import BASELINE
    from coevolve.storage.parquet import write_table, write_text_atomic

    plan, root = prepare(replace(plan, arms=("grpo",)))  # the shared warm start only
    candidates = [t.name for t in CANDIDATES]
    config = load_config(plan.config, [*plan.overrides, "eval.splits=[gap-validation]", f"eval.samples={SAMPLES}",
                                       "eval.greedy=false", "eval.baseline=true"])  # fmt: skip
    options = {**config.env.options, "gap_families": candidates}
    config = config.model_copy(update={"env": config.env.model_copy(update={"options": options})})
    ctx = open_run(config, f"{plan.experiment.prefix}-gap-families", root)
    write_text_atomic(config.to_yaml(), ctx.store.layout.config_path)
    record = run_stage(BASELINE, ctx, 0)
    evals = pl.from_arrow(ctx.store.read(0, "baseline", "evals"))
    table = judge_families(evals)
    out.mkdir(parents=True, exist_ok=True)
    write_table(table.to_arrow(), out / "gap-families.parquet")
    text = render(table, Path(config.model.name).name, record.manifest.seconds)
    write_text_atomic(text, out / "gap-families.md")
    return text


def judge_families(evals: pl.DataFrame) -> pl.DataFrame:
    """Per family: tasks, episodes, success, mean reward, the share of tasks whose samples' rewards differ,
    and `RULE`'s verdict (`gap`, `solved` or `no signal`)."""
    per_task = evals.group_by("family", "task_id").agg(
        success=pl.col("success").cast(pl.Float64).mean(), reward=pl.col("reward").mean(),
        spread=(pl.col("reward").max() - pl.col("reward").min()) > 1e-9,
    )  # fmt: skip
    table = per_task.group_by("family").agg(
        tasks=pl.len(), success=pl.col("success").mean(), reward=pl.col("reward").mean(),
        spread_share=pl.col("spread").cast(pl.Float64).mean(),
    ).with_columns(episodes=pl.col("tasks") * SAMPLES)  # fmt: skip
    verdict = (pl.when(pl.col("success") > MAX_SUCCESS).then(pl.lit("solved"))
               .when(pl.col("spread_share") < MIN_SPREAD_SHARE).then(pl.lit("no signal"))
               .otherwise(pl.lit("gap")))  # fmt: skip
    return table.with_columns(verdict=verdict).sort("verdict", "family")


def render(table: pl.DataFrame, model: str, seconds: float) -> str:
    rows = [f"| {r['family']} | {r['tasks']} | {r['episodes']} | {100 * r['success']:.1f} % | {r['reward']:.3f} | "
            f"{100 * r['spread_share']:.0f} % | {r['verdict']} |" for r in table.iter_rows(named=True)]  # fmt: skip
    gap = table.filter(pl.col("verdict") == "gap")["family"].to_list()
    return "\n".join([
        "# Candidate gap families: the warm start on gap-validation", "",
        f"Policy: `{model}`; {SAMPLES} sampled episodes per task at the rollout temperature; {seconds:.0f} s.",
        f"Rule, fixed before the measurement: {RULE}.", "",
        "| family | tasks | episodes | success | reward | tasks with reward spread | verdict |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"Gap ({len(gap)} families): {', '.join(gap) or 'none'}.", "",
    ])
