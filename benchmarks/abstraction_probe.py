"""How many of a teacher's abstractions survive verification's environment checks, by replies per group.

    coevolve bench abstraction-probe --root ROOT --model <checkpoint> --samples 1 4
    coevolve bench abstraction-probe --root ROOT --model <checkpoint> --samples 4 --single-calls --prefill plain effect
    coevolve bench abstraction-probe --root ROOT --recheck 'learning-coevolve-%'

The groups are real ones: the triples of the stored explorations of every run and round under ROOT (a
storage root of the learning benchmark's runs), regrouped with `stages.abstract.abstraction.build_groups`
(`--single-calls`: and each call alone, `single_call_groups`). For each `--samples` value and `--prefill`
way of starting a one-call reply (`plain`: the solution; `effect`: also what the call did,
`evolve.abstract_prefill_effect`) the teacher (the model in process, the learning config's sampling)
abstracts every group through `stages.abstract.abstraction.abstract_groups`, and every `ok` candidate goes
through `stages.verify.verification.check_solutions` (replay, read answers, effect, solvability, grounding,
reference replay; no policy attempt), its sibling duplicates in its place while it fails, as in the
verify stage. Prints candidates by status, the solutions that pass (`passes`) and the reasons of every
wording discarded on the way. `--recheck RUNS`: no teacher; the stored candidates of the matching runs go
through this checkout's checks (what a change of verification does to real output). The solutions that
pass are appended to `benchmarks/results/abstraction-probe.jsonl`; they depend on the runs under ROOT.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import duckdb

from coevolve import envs
from coevolve.agents.teacher import EngineTeacher, TeacherSettings
from coevolve.benchmarks.record import command_line, figure, record_result
from coevolve.benchmarks.suite import argument_parser
from coevolve.envs.base import Task
from coevolve.llm.chat import ChatFormat
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model
from coevolve.stages.abstract.abstraction import abstract_groups, build_groups, single_call_groups
from coevolve.stages.verify.contamination import HeldOut
from coevolve.stages.verify.verification import VerifySettings, check_solutions


def stored_groups(root: Path, env_name: str) -> list:
    """Every exploration group of every run under `root`, with the task it explored from."""

    def rows(sql: str) -> list[dict]:
        return duckdb.sql(sql).df().to_dict("records")

    explorations = rows(f"SELECT * FROM read_parquet('{root}/run=*/round=*/stage=explore/explorations.parquet', "
                        "filename = true)")  # fmt: skip
    triples = rows(f"SELECT * FROM read_parquet('{root}/run=*/round=*/stage=triples/triples.parquet')")
    known = {t.id: t for split in envs.make(env_name).splits() for t in envs.make(env_name).tasks(split)}
    synthesized = rows(f"SELECT task FROM read_parquet('{root}/run=*/round=*/stage=verify/verifications.parquet') "
                       "WHERE task IS NOT NULL")  # fmt: skip
    known.update({(t := Task.from_row(json.loads(r["task"]))).id: t for r in synthesized})
    task_of: dict[str, Task] = {
        x["exploration_id"]: known[x["task_id"]] for x in explorations if x["task_id"] in known
    }
    groups = build_groups([t for t in triples if t["exploration_id"] in task_of], task_of)
    return [g for g in groups if g.calls]


def environment_verdicts(make_env, rows: list[dict]) -> Counter:
    """Verification's environment checks (no policy attempt) over one batch of candidate rows, siblings
    standing in for a discarded candidate as in the verify stage: solutions that pass, reasons of the rest."""
    verdicts = Counter()
    for passed, rejected in check_solutions(make_env, rows, HeldOut(), VerifySettings()):
        verdicts.update(reason.split(":")[0] for _, reason in rejected)
        if passed is not None:
            verdicts["passes"] += 1
            print(f"  passes: {passed.row['query'][:90]!r} {passed.row['solution'][:90]}", flush=True)
    return verdicts


def recheck(root: Path, runs: str) -> Counter:
    """`--recheck`: the stored candidates of the runs matching `runs` (SQL LIKE), each run's round as one
    batch, through this checkout's environment checks: what a verification change does to real output."""
    make_env = lambda: envs.make("toolworld", seed=0)  # noqa: E731
    rows = duckdb.sql(f"SELECT * FROM read_parquet('{root}/run=*/round=*/stage=abstract/candidates.parquet', "
                      "hive_partitioning = true) WHERE run LIKE $runs",  # file order: the stage's order
                      params={"runs": runs}).df().to_dict("records")  # fmt: skip
    batches: dict[tuple, list[dict]] = {}
    for row in rows:
        batches.setdefault((row["run"], row["round"]), []).append(row)
    total = Counter()
    for batch in batches.values():
        total += environment_verdicts(make_env, batch)
    print(f"{len(rows)} stored candidates of {len(batches)} run rounds -> {dict(total)}", flush=True)
    return total + Counter(candidates=len(rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("abstraction-probe", __doc__)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--model", help="teacher model: a name or checkpoint directory")
    parser.add_argument("--recheck", metavar="RUNS",
                        help="no teacher: re-check the stored candidates of the runs matching this SQL LIKE pattern")
    parser.add_argument("--samples", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--single-calls", action="store_true", help="also abstract each call of a group alone")
    parser.add_argument("--prefill", nargs="+", choices=["plain", "effect"], default=["plain"],
                        help="how a one-call reply starts: the solution, or also what the call did")
    parser.add_argument("--duplicate-jaccard", type=float, default=0.8)
    args = parser.parse_args(argv)
    command = command_line("abstraction-probe", argv)
    if args.recheck:
        total = recheck(args.root, args.recheck)
        record_result("abstraction-probe", {"stored candidates": figure(total["candidates"], ""),
                                            "solutions that pass": figure(total["passes"], "")},
                      command=command, variant="recheck")  # fmt: skip
        return
    if not args.model:
        parser.error("--model is required unless --recheck")
    make_env = lambda: envs.make("toolworld", seed=0)  # noqa: E731
    groups = stored_groups(args.root, "toolworld")
    if args.single_calls:
        groups += single_call_groups(groups)
    model, tokenizer = load_model(args.model)
    settings = TeacherSettings(args.temperature, args.max_new_tokens, 64, 4096)
    teacher = EngineTeacher(args.model, HfEngine(model, tokenizer), ChatFormat(tokenizer), settings)
    print(f"{len(groups)} groups with a successful call", flush=True)
    figures = {"groups": figure(len(groups), "")}
    for samples, prefill in ((s, p) for s in args.samples for p in args.prefill):
        started = time.perf_counter()
        rows = abstract_groups(teacher, make_env, groups, env="toolworld", max_tasks=3,
                               duplicate_jaccard=args.duplicate_jaccard, existing=[], seed=0, samples=samples,
                               prefill_effect=prefill == "effect")  # fmt: skip
        seconds = time.perf_counter() - started
        verdicts = environment_verdicts(make_env, rows)
        statuses = Counter(r["status"] for r in rows)
        print(f"samples {samples}, prefill {prefill}: {dict(statuses)} in {seconds:.0f} s; ok candidates -> {dict(verdicts)}",
              flush=True)  # fmt: skip
        figures[f"solutions that pass, {samples} samples, prefill {prefill}"] = figure(verdicts["passes"], "")
    record_result("abstraction-probe", figures, command=command, variant="teacher")


if __name__ == "__main__":
    main()
