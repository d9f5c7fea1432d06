"""`coevolve bench learning`: the learning benchmark's options, where its outputs go, and its result row.

    coevolve bench learning --quick
    coevolve bench learning --seeds 16 --first-seed 10 --arms grpo coevolve \
        --out benchmarks/results/learning/<record>

The outputs go next to the runs (`<storage root>/learning-report/`) unless `--out` names a folder, so a
trial run never overwrites a committed record under `benchmarks/results/learning/`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from coevolve.benchmarks.learning.arms import ARMS, REGIMES, Plan
from coevolve.benchmarks.learning.outcomes import reported_outcomes
from coevolve.benchmarks.learning.report import record_runs, report
from coevolve.benchmarks.learning.runs import ensure_shared_baseline, prepare, run_arms
from coevolve.benchmarks.learning.statistics import differences, paired_test
from coevolve.benchmarks.record import REPO, RESULTS, command_line, current_commit, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.rl.warm_start import WarmStart

REPORT_FOLDER = "learning-report"
"""Default output folder, under the storage root."""


def parser() -> argparse.ArgumentParser:
    parser = argument_parser("learning")
    parser.add_argument("--quick", action="store_true", help="grpo and coevolve, one seed, 2 rounds, 8 eval tasks per split")
    parser.add_argument("--regime", choices=list(REGIMES), default="in-distribution",
                        help="which experiment: its config, arms and splits (docs/experiments/learning-protocol.md)")
    parser.add_argument("--config", type=Path, help="config every arm starts from (default: the regime's)")
    parser.add_argument("--gap-families", action="store_true",
                        help="coverage regime: measure the warm start's sampled reward on every candidate gap "
                             "family of validation (the step that fixes the gap), then exit")
    parser.add_argument("--rounds", type=int, help="rounds per run (default: the config's run.rounds; --quick 2)")
    parser.add_argument("--seeds", type=int, help="seeds of grpo and coevolve (default 3, --quick 1; ablations: seed 0)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="run only seeds >= this; the report still covers seeds 0.. (from storage, or from "
                             "the outcomes.parquet an earlier invocation of the same plan wrote to --out)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=[], metavar="ARM",
                        help=f"run only these arms ({', '.join(ARMS)})")
    parser.add_argument("--arm", dest="arms", action="append", choices=list(ARMS), metavar="ARM",
                        help="one arm (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--warm-start-tasks", type=int, default=WarmStart.tasks,
                        help="reference episodes of the supervised warm start every arm starts from (0: none)")
    parser.add_argument("--teacher-tasks", type=int, default=WarmStart.tasks,
                        help="tasks of the evolving arms' own teacher build (abstraction and reflection replies "
                             "each; 0: the config's teacher)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each in its own process with the cores split between them")
    parser.add_argument("--share", action=argparse.BooleanOptionalAction, default=True,
                        help="start each arm as a fork of the grpo run of its seed, so the stages they compute "
                             "identically run once")
    parser.add_argument("--final", action="store_true",
                        help="the final report: evaluate test and heldout-templates; refuses a plan that differs "
                             "from the one frozen with --freeze (pilots evaluate validation only)")
    parser.add_argument("--freeze", action="store_true",
                        help="record this plan as the one the final report runs (frozen-plan.json in --out), "
                             "then exit")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the stored runs without running anything")
    parser.add_argument("--result-row", action="store_true",
                        help="with --report-only: also append the plan's result row, from its record (a plan run "
                             "over several sittings, once its record holds every run)")
    parser.add_argument("--note", default="", help="the result row's note (what the figures are, where they are told)")
    parser.add_argument("--root", type=Path, help="storage root (default: COEVOLVE_HOME or runs/)")
    parser.add_argument("--baseline-from", type=Path,
                        help="a regime with one shared baseline: the storage root of an earlier sitting holding "
                             "it, copied into --root instead of computed again")
    parser.add_argument("--out", type=Path,
                        help=f"where report.md, curves and outcomes.parquet go (default: <root>/{REPORT_FOLDER}; "
                             "a committed record: benchmarks/results/learning/<record>)")
    return parser


def plan_of(args: argparse.Namespace) -> Plan:
    return Plan.make(quick=args.quick, config=args.config, rounds=args.rounds, seeds=args.seeds,
                     arms=args.arms, overrides=args.overrides, warm_start_tasks=args.warm_start_tasks,
                     teacher_tasks=args.teacher_tasks, jobs=args.jobs, share=args.share,
                     first_seed=args.first_seed, phase="final" if args.final else "validation",
                     regime=args.regime)  # fmt: skip


def output_folder(args: argparse.Namespace, root: Path) -> Path:
    """`--out`, else `<root>/learning-report`: never a committed record unless named."""
    return args.out if args.out is not None else root / REPORT_FOLDER


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser()
    args = cli.parse_args(argv)
    commit = current_commit()  # before the outputs, which may go into the checkout, are written
    if args.root is not None:
        os.environ["COEVOLVE_HOME"] = str(args.root)
    try:
        plan, root = prepare(plan_of(args), build=False)  # a config or plan mistake fails before any run
    except ValueError as exc:  # ConfigError is a ValueError too
        cli.error(str(exc))
    if args.gap_families:
        from coevolve.benchmarks.learning.gap import measure_gap_families

        _check_prefect_api(cli)
        _quiet_transformers()
        print(measure_gap_families(plan_of(args), output_folder(args, root)))
        return
    if args.freeze or args.final:
        from coevolve.benchmarks.learning.protocol import ProtocolError, check_frozen, freeze

        if args.out is None:
            cli.error("--freeze and --final need --out, the record folder the frozen plan lives in")
        try:
            if args.freeze:
                print(f"frozen: {freeze(plan, root, args.out)}")
                return
            check_frozen(plan, root, args.out)
        except ProtocolError as exc:
            cli.error(str(exc))
    if args.result_row and not args.report_only:
        cli.error("--result-row goes with --report-only (a run appends its result row itself)")
    if not args.report_only:
        _check_prefect_api(cli)
        _quiet_transformers()
        plan, root = prepare(plan_of(args))
    out = output_folder(args, root)
    sealed = plan.phase == "final" and plan.experiment.sealed_test and not args.report_only
    try:
        if plan.experiment.shared_baseline and not args.report_only:
            print(f"--- the plan's baseline: {ensure_shared_baseline(plan, root, args.baseline_from, out)}", flush=True)
        wall = run_arms(plan, root) if not args.report_only else {}
        if sealed:  # a final run records its rows; its figures wait for the final report
            print(record_runs(root, plan, out, wall))
            return
        text = report(root, plan, out, wall)
    except ValueError as exc:  # a record in --out that is unreadable, or of other stage code (MixedCodeError)
        cli.error(str(exc))
    print(text)
    if args.report_only and not args.result_row:  # a report of stored runs measures nothing new: no row
        print(f"outputs in {out}")
        return
    row = record_result("learning", headline(root, plan, out), command=command_line("learning", argv),
                        variant=_variant(args, out), outputs=_shown(out), note=args.note, commit=commit)  # fmt: skip
    print(f"figures appended to {row['benchmark']}.jsonl; outputs in {out}")


def headline(root: Path, plan: Plan, out: Path) -> dict[str, dict]:
    """The result row's figures of the plan's outcomes (`headline_figures`)."""
    evals, _ = reported_outcomes(root, plan, out)
    return headline_figures(evals, plan.arms, plan.rounds)


def headline_figures(evals: pl.DataFrame, arms: Sequence[str], rounds: int) -> dict[str, dict]:
    """Each arm - grpo per split and on all (with the bootstrap interval), the McNemar p-value per split and
    over all splits together, each named by its splits; each arm's final held-out success per split."""
    figures = {}
    splits = sorted(evals["split"].unique())
    for arm in (a for a in arms if a != "grpo"):
        for split, got in differences(evals, arm, "grpo", updates=rounds).items():
            if got is not None:
                figures[f"{arm} - grpo, {split}"] = figure(100 * got[0], "points", (100 * got[1], 100 * got[2]))
        for split in [*splits, "all splits"]:
            scope = evals if split == "all splits" else evals.filter(pl.col("split") == split)
            tested = paired_test(scope, arm, "grpo", updates=rounds)
            if tested is not None and (split == "all splits" or len(splits) > 1):
                figures[f"{arm} - grpo, McNemar p, {split}"] = figure(tested["p"], "")
    final = evals.filter(pl.col("updates") == rounds)
    for (arm, split), rows in sorted(final.group_by("arm", "split")):
        figures[f"{arm} final {split} success"] = figure(100 * rows["success"].mean(), "%")
    figures["seeds"] = figure(evals["seed"].n_unique(), "")
    return figures


def _variant(args: argparse.Namespace, out: Path) -> str:
    """`quick`, or the record's folder name when the outputs go to a committed record, else `scratch`."""
    if args.quick:
        return "quick"
    return out.name if out.resolve().is_relative_to(RESULTS.resolve()) else "scratch"


def _shown(out: Path) -> str:
    try:
        return str(out.resolve().relative_to(REPO))
    except ValueError:
        return ""  # a scratch folder means nothing to another reader


def _check_prefect_api(cli: argparse.ArgumentParser) -> None:
    from coevolve.flows.serve import api_problem

    problem = api_problem(required=False)
    if problem:
        cli.exit(2, f"error: {problem}\n")


def _quiet_transformers() -> None:
    """Keep the terminal for the runs' progress and summary lines when `coevolve` asked libraries to be quiet."""
    if os.environ.get("TRANSFORMERS_VERBOSITY") == "error":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
