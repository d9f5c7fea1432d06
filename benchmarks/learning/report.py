"""The learning benchmark's outputs: `report.md` (held-out success, coevolve - grpo, per-run tables),
`curves.parquet`, `curves.png`, and the record a later invocation adds seeds to: `outcomes.parquet` and the
per-run tables in `runs/` (`run_record`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.arms import ARMS, Plan
from coevolve.benchmarks.learning.audit import link_table
from coevolve.benchmarks.learning.coverage import gap_tools
from coevolve.benchmarks.learning.outcomes import (
    OUTCOMES,
    arm_of_run,
    code_version,
    curves,
    plan_fingerprint,
    reported_outcomes,
)
from coevolve.benchmarks.learning.run_record import RECORD, recorded_tables
from coevolve.benchmarks.learning.statistics import (
    bootstrap_difference,
    differences,
    family_table,
    paired_test,
    power,
    seed_differences,
    seeds_for_power,
    summary,
)
from coevolve.benchmarks.learning.tables import STAGE_ORDER, top_reasons


def markdown_table(frame: pl.DataFrame, percent: Sequence[str] = ()) -> str:
    def cell(column: str, value: object) -> str:
        if value is None:
            return "-"
        if column in percent:
            return f"{100 * float(value):.1f} %"
        if isinstance(value, float):  # counts and seconds of thousands: whole, with separators
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}"
        return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)

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
            f"(stages/warm_start/build.py).")  # fmt: skip


def describe_runs(runs: Sequence[str]) -> str:
    """Run names of this benchmark as arms with seed ranges, e.g. `grpo s0-9, 13; coevolve s0-9`."""
    seeds: dict[str, list[int]] = {}
    for name in runs:
        arm, _, seed = name.split("-", 1)[1].rpartition("-s")
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


def _provenance_lines(from_record: Sequence[str], untabled: Sequence[str], missing: Sequence[str],
                      out: Path) -> list[str]:  # fmt: skip
    lines = []
    if from_record:
        tabled = [n for n in from_record if n not in untabled]
        tables = f", and the per-run tables of {describe_runs(tabled)} from `{out / RECORD}/`" if tabled else ""
        lines += [f"Held-out outcomes of {describe_runs(from_record)} come from `{out / OUTCOMES}`, recorded by "
                  f"an earlier invocation of this plan (those runs are not in this storage root){tables}.", ""]  # fmt: skip
    if untabled:
        lines += [f"{describe_runs(untabled)} have no per-run tables in `{out / RECORD}/`: the tables below leave "
                  f"them out, the report.md committed with their outcomes has them.", ""]  # fmt: skip
    if missing:
        lines += [f"No held-out outcomes of this plan yet for {describe_runs(missing)}: the tables leave them out.",
                  ""]  # fmt: skip
    return lines


def arm_costs(per_run: pl.DataFrame) -> dict[str, dict[str, float]]:
    """Per arm, means over its runs: generated tokens (all sources), stage seconds, feedback share."""
    tokens = [c for c in per_run.columns if c.endswith("_tokens")]
    frame = per_run.with_columns(arm=arm_of_run(),
                                 tokens=pl.sum_horizontal(tokens) if tokens else pl.lit(0))  # fmt: skip
    means = frame.group_by("arm").agg(pl.col("tokens", "stages_s", "feedback_share").mean())
    return {row["arm"]: row for row in means.iter_rows(named=True)}


def headline_table(evals: pl.DataFrame, plan: Plan, costs: dict[str, dict[str, float]]) -> pl.DataFrame:
    """Per arm: final success per split; its difference to grpo on the regime's endpoint (`Plan.endpoint`;
    all splits together without one) with the paired 95 % interval, the McNemar p-value and, from the spread
    of per-seed differences, the power to detect the regime's effect with these seeds and the seeds that
    would give 80 %; mean tokens, stage seconds and feedback share."""
    final = evals.filter(pl.col("updates") == plan.rounds)
    endpoint = plan.endpoint
    compared = evals if endpoint is None else evals.filter(pl.col("split") == endpoint)
    effect = plan.experiment.effect
    difference, at_effect = (f"- grpo on {endpoint or 'all splits'} (points)", f"power at +{100 * effect:.0f}")
    rows = []
    for arm in [a for a in ARMS if a in set(final["arm"])]:
        row: dict = {"arm": arm}
        for split in sorted(final["split"].unique()):
            values = final.filter((pl.col("arm") == arm) & (pl.col("split") == split))["success"]
            row[split] = values.mean() if values.len() else None
        if arm != "grpo":
            got = bootstrap_difference(compared, arm, "grpo", updates=plan.rounds)
            tested = paired_test(compared, arm, "grpo", updates=plan.rounds)
            spread = seed_differences(compared, arm, "grpo", updates=plan.rounds)
            sd = statistics.stdev(spread) if len(spread) > 1 else None
            row |= {difference: None if got is None else f"{100 * got[0]:+.1f} [{100 * got[1]:+.1f}, "
                                                         f"{100 * got[2]:+.1f}]",
                    "McNemar p": None if tested is None else f"{tested['p']:.3g} ({tested['wins']}/{tested['losses']})",
                    at_effect: None if sd is None else f"{power(sd, effect, len(spread)):.2f}",
                    "seeds for 0.8": None if sd is None else seeds_for_power(sd, effect)}  # fmt: skip
        cost = costs.get(arm, {})
        row |= {"tokens": cost.get("tokens"), "stage s": cost.get("stages_s"), "feedback": cost.get("feedback_share")}
        rows.append(row)
    return pl.DataFrame(rows)


def rescored_section(rescored: pl.DataFrame, evals: pl.DataFrame, rounds: int) -> list[str]:
    """Each re-evaluation of a run on tasks of environment options no run used, beside the run's own final
    success on the same split (nothing when no run was re-scored)."""
    if not rescored.height:
        return []
    own = (evals.filter(pl.col("updates") == rounds).group_by("run", "split")
           .agg(own_success=pl.col("success").mean()))  # fmt: skip
    table = rescored.join(own, on=["run", "split"], how="left").select(
        "run", "round", "options", "split", "tasks", "success", "own_success")
    return ["## Re-scored on tasks no run used", "",
            "The final policy evaluated on the splits of an environment made with other options (`coevolve eval "
            "--run R --env-seed N`: tasks of another seed, none of the run's own or its warm start's), beside "
            "its success on the run's own split:", "",
            markdown_table(table, percent=("success", "own_success")), ""]  # fmt: skip


INTERVALS = ("`- grpo`: mean difference, 95 % bootstrap interval resampling seeds and task families (an update moves "
             "a family's tasks together). McNemar p: the exact sign test on the (seed, task) pairs whose "
             "outcomes differ (wins/losses; McNemar's test with one episode per task, success rates with "
             "`eval.samples`), which takes tasks as independent and so overstates the evidence when they move by family; power: the seed as "
             "the unit (`benchmarks/learning/statistics.py`).")
def reproduce_line(plan: Plan) -> str:
    return ("One run (arm A, seed S) is rebuilt, warm starts included, by the command that made this record "
            f"with `--arm A --seeds S+1 --first-seed S --root EMPTY_ROOT`; `coevolve eval --run "
            f"{plan.experiment.prefix}-A-sS --env-seed N --root EMPTY_ROOT` then scores its final policy on tasks "
            "of an environment seed N that no run used (`flows/reevaluate.py`), and the next report shows it.")


def _nothing_to_report(root: Path, plan: Plan, out: Path, planned: Sequence[str], record: pl.DataFrame) -> str:
    """Why a plan has no outcome to report, in one line: which runs, where they were looked for, which plans
    the record does hold."""
    held = ", ".join(sorted(set(record["plan"].drop_nulls()))) or "none"
    return (f"nothing to report: no run of this plan ({describe_runs(planned)}) is stored under {root}, and "
            f"{out / OUTCOMES} records none of them under this plan's fingerprint {plan_fingerprint(plan, root)} "
            f"(it holds plans: {held}); the config file's text, the rounds, the overrides (warm starts included) "
            "and the teacher build make the fingerprint: pass those of the invocation that measured them")


def audit_links_section(tables: dict[str, pl.DataFrame], plan: Plan) -> list[str]:
    """The gap's link table computed from the recorded audit rows alone (`audit.link_table`), with the
    exploration yield; nothing for a plan without a coverage gap or runs without audit rows."""
    from coevolve.config import load_config

    gap = gap_tools(load_config(plan.config, list(plan.overrides)).gap_families)
    explorations = tables.get("audit_explorations")
    if not gap or explorations is None or not explorations.height:
        return []
    runs = sorted(set(explorations["run"]))
    links = link_table(explorations, tables["audit_admitted"], tables["audit_eval_tools"], dict.fromkeys(runs, gap))
    links = links.with_columns(yield_=pl.col("called_named") / pl.col("named_gap")).rename({"yield_": "yield"})
    return ["## The coverage gap from the audit rows", "",
            "Per run, from `runs/audit_*.parquet` alone: explorations; those whose signal names a gap tool and, "
            "of them, those whose episodes then called it successfully (`yield`); explorations calling any gap "
            "tool; candidates and admitted tasks calling one; the gap split's final episodes, their successes, and "
            "the successes that called a gap tool (`benchmarks/learning/audit.py: link_table`):", "",
            markdown_table(links, percent=("yield",)), ""]  # fmt: skip


def record_runs(root: Path, plan: Plan, out: Path, wall: dict[str, float]) -> str:
    """A sealed final run's record (`Regime.sealed_test`): the outcomes and the per-run tables of this plan's
    runs in `out`, no report, curve or figure; returns one line naming what was recorded, without a figure."""
    from coevolve.storage.parquet import write_table

    planned = [plan.run_name(arm, seed) for arm, seed in plan.reported_runs()]
    evals, record = reported_outcomes(root, plan, out)
    if not evals.height:
        raise ValueError(_nothing_to_report(root, plan, out, planned, record))
    names = [n for n in planned if (root / f"run={n}").exists()]
    out.mkdir(parents=True, exist_ok=True)
    write_table(record.to_arrow(), out / OUTCOMES)
    recorded_tables(root, names, out, plan_fingerprint(plan, root), planned, wall,
                    plan_fingerprint(plan, root, teacher=False))
    done = [n for n in planned if n in set(evals["run"])]
    return (f"recorded {describe_runs(done)} in {out} ({len(done)} of {len(planned)} planned runs); the final "
            "splits are read once, by --final --report-only")


def report(root: Path, plan: Plan, out: Path, wall: dict[str, float]) -> str:
    planned = [plan.run_name(arm, seed) for arm, seed in plan.reported_runs()]
    evals, record = reported_outcomes(root, plan, out)
    if not evals.height:
        raise ValueError(_nothing_to_report(root, plan, out, planned, record))
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
    tables = recorded_tables(root, names, out, plan_fingerprint(plan, root), planned, wall,
                             plan_fingerprint(plan, root, teacher=False))
    per_run = tables["per_run"]
    untabled = [n for n in from_record if n not in set(per_run["run"])]
    splits = sorted(evals["split"].unique()) if evals.height else []
    head = headline_table(evals, plan, arm_costs(per_run)) if evals.height else pl.DataFrame()
    parts = [f"# Learning benchmark ({time.strftime('%Y-%m-%d')})", "",
             f"Phase `{plan.phase}`: held-out splits {', '.join(splits) or 'none yet'} "
             f"(docs/experiments/learning-protocol.md).", "",
             "## Headline", "", markdown_table(head, percent=(*splits, "feedback")) if head.height else "-", "",
             INTERVALS, "",
             f"config `{plan.config}`, {plan.rounds} rounds, planned runs {describe_runs(planned)}, "
             f"overrides {' '.join(plan.overrides) or '(none)'}, stage code version {code_version()}", "",
             _warm_start_line(plan), "",
             *_provenance_lines(from_record, untabled, missing, out), reproduce_line(plan), "",
             "## Held-out success per arm (mean over seeds)", "",
             markdown_table(summary(curve, final), percent=("baseline", "final", "best")), ""]  # fmt: skip
    endpoint = plan.endpoint
    if endpoint is not None:
        arms = [a for a in ARMS if a in set(evals["arm"])]
        parts += [f"## {endpoint}, family by family", "",
                  "Success before any update (the shared warm start) and after the last one, per arm (means over "
                  "seeds and the family's tasks):", "",
                  markdown_table(family_table(evals, endpoint, final, arms), percent=("baseline", *arms)), ""]
    parts += ["## coevolve - grpo after the last update (bootstrap 95 % interval over seeds and task families)", ""]
    for split, got in differences(evals, "coevolve", "grpo", updates=final).items():
        if got is not None or split != "both splits":
            parts.append(f"- {split}: " + ("n/a" if got is None else
                         f"{100 * got[0]:+.1f} points [{100 * got[1]:+.1f}, {100 * got[2]:+.1f}]"))  # fmt: skip
    parts += ["", "## Per run: signals, admitted tasks, generated tokens, time", "",
              markdown_table(per_run.sort("run"), percent=("feedback_share",)), "",
              "`revisited`: tasks drawn for rollouts in two or more rounds, the only ones the forgetting signal "
              "can fire on. `stages_s`: the stages' own seconds, round 0's counted in every arm that forked it; "
              "`wall_s`: what the invocation that computed the run spent on it.", "",
              "## Wall seconds per stage (sum over rounds)", "",
              markdown_table(stage_table(tables["stage_seconds"])), "",
              "## Synthesized tasks admitted per round", "",
              markdown_table(tables["admitted_per_round"]), "",
              "## The teacher's explorations, its candidates and their verdicts", "",
              "Distinct calls that ran in the exploration groups, and those that are no call of the explored "
              "task's reference solution:", "",
              markdown_table(tables["exploration"]), "",
              markdown_table(tables["teacher_output"]), "",
              "Most frequent reasons a candidate was not `ok` or was discarded (JSON, ids and numbers folded):", "",
              markdown_table(top_reasons(tables["rejections"])), "",
              "## Coverage: what the evolved data reaches that D_0 does not", "",
              "Tools offered to D_0's tasks that no D_0 solution calls (`unused_tools`), how many of them the "
              "explorations called and the admitted tasks' solutions call; admitted tasks of two or more calls, "
              "and those whose sequence of tools no D_0 task has (`benchmarks/learning/coverage.py`):", "",
              markdown_table(tables["coverage"]), ""]  # fmt: skip
    parts += audit_links_section(tables, plan)
    links = tables["gap_links"]
    if links.height:
        parts += ["## The coverage gap, link by link", "",
                  "The gap families' tools (`gap_tools`), how many of them an exploration called, the `ok` "
                  "candidates and admitted tasks whose solution calls one, and the rollouts of those admitted "
                  "tasks and their successes (`benchmarks/learning/coverage.py: gap_links`):", "",
                  markdown_table(links), ""]  # fmt: skip
    parts += rescored_section(tables["rescored"], evals, plan.rounds)
    text = "\n".join(parts)
    write_text_atomic(text, out / "report.md")
    return text
