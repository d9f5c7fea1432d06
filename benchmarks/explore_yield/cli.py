"""`coevolve bench explore-yield`: the options, the teachers and variants, one measurement end to end."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from coevolve.benchmarks.record import command_line, current_commit, results_dir
from coevolve.benchmarks.suite import argument_parser

CONFIG = Path("configs/coverage-smollm2.yaml")
NAMED_TOOL_EXAMPLES = "warm_start.teacher_named_tool_examples=true"
TEACHERS: dict[str, tuple[Path | None, tuple[str, ...]]] = {
    "coverage": (None, ("warm_start.policy_tasks=48", "warm_start.teacher_tasks=48")),
    "named-tool": (None, ("warm_start.policy_tasks=48", "warm_start.teacher_tasks=48", NAMED_TOOL_EXAMPLES)),
    "demo": (Path("configs/demo.yaml"), ()),
    "demo-named-tool": (Path("configs/demo.yaml"), (NAMED_TOOL_EXAMPLES,)),
}  # fmt: skip
"""Where the policy and teacher starts come from: (a config whose `warm_start` section builds them, None: the
measured config itself; the overrides of that section). `coverage`: the coverage experiment's (the policy
fine-tuned on 48 tasks, the teacher from it on 48 others; full fine-tunes trained once per machine, about
15 minutes each on an idle 2-core machine); `named-tool`: that teacher also trained on examples that name and
call an unused training tool; `demo`: the demo's LoRA starts (the same kinds of examples, shipped in
configs/warm-starts/ and merged in seconds); `demo-named-tool`: the demo's teacher with the named-tool
examples (its policy start merged, the teacher trained once)."""
VARIANTS: dict[str, tuple[str, ...]] = {
    "control": (),
    "unused": ("signals.kinds=[forgetting, boundary, rare, unused]",),
    "context": ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.named_tool_context=true"),
    "full": ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.allotment=round_robin",
             "explore.named_tool_context=true", "explore.prefill_named_tool=true"),
    "full-args": ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.allotment=round_robin",
                  "explore.named_tool_context=true", "explore.prefill_named_tool=true",
                  "explore.prefill_arguments=true"),
    "listing-first": ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.allotment=round_robin",
                      "explore.named_tool_context=true", "explore.prefill_named_tool=true",
                      "explore.prefill_listing_first=true"),
    "listing-call-question": ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.allotment=round_robin",
                              "explore.named_tool_context=true", "explore.prefill_named_tool=true",
                              "explore.prefill_listing_first=true", "explore.prefill_listing_call=true",
                              "abstract.prefill_question=true"),
}  # fmt: skip
"""How the exploration is set up. `control`: the paper's kinds, no tool named (no named-tool context, no
prefill); `unused`: the signal names its tool (the `unused` kind); `context`: and the exploration context
holds the tool's schema and its app's listing; `full`: and the first call's tool name is prefilled, signals
allotted round robin across kinds (selection precedes the links measured here: it changes no row);
`full-args`: and the prefilled call opens its arguments at the first required parameter (the design change
the `full` rows called for: docs/experiments/2026-12-07-explore-yield.md); `listing-first`: the first reply
is prefilled as the listing's call, the second as the named tool's with its first value opened (the
change the `full-args` rows called for: their calls failed on ids the teacher had not yet seen);
`listing-call-question`: and the listing's whole call is the first reply (the `listing-first` rows: the
teacher wrote `"arguments": 0` after the listing's name, a malformed call, in every exploration), and a
read-only call's task is opened as a question naming its values (their candidates calling the gap tool
were instructions or questions naming no id: `no effect`, `unsolvable`)."""


def load(config: Path, teacher: str, variant: str, sets: Sequence[str]) -> Any:
    """The run config of (`teacher`, `variant`); one line naming the field when this checkout lacks it."""
    from coevolve.config import load_config

    try:
        source, starts = TEACHERS[teacher]
        return load_config(config, [*(starts if source is None else ()), *VARIANTS[variant], *sets])
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise SystemExit(f"error: teacher {teacher!r}, variant {variant!r}: {first}") from None


def held_out_tasks(config: Any, make_env) -> list:
    """The tasks of the config's eval splits, which verification's contamination guard keeps out."""
    env = make_env()
    try:
        return [task for split in config.eval.splits for task in env.tasks(split)]
    finally:
        env.close()


def measure(config: Any, teacher: Any, policy: Any, *, variant: str, worlds: int, rounds: int) -> list[dict]:
    """Exploration rows of `rounds` rounds, each over `worlds` validation worlds per gap tool (drawn anew
    each round), with `teacher` exploring and abstracting and `policy` attempting verified candidates."""
    from coevolve import envs
    from coevolve.benchmarks.explore_yield.run import measure_round
    from coevolve.benchmarks.explore_yield.targets import build_aims

    make_env = lambda: envs.make(config.env.name, **config.env.options)  # noqa: E731
    env = make_env()
    try:
        validation = env.tasks("validation")
    finally:
        env.close()
    held_out, rows = held_out_tasks(config, make_env), []
    for round_ in range(rounds):
        aims = build_aims(make_env, validation, config.gap_families, per_tool=worlds, named=variant != "control",
                          seed=round_, round_=round_)  # fmt: skip
        rows += measure_round(teacher, policy, config, make_env, aims, round_=round_,
                              held_out=held_out)  # fmt: skip
    return rows


def started(config: Any, teacher: str) -> Any:
    """`config` with the starts of `teacher` (`TEACHERS`: its own `warm_start` section's, or another config's,
    of which it takes the model and the teacher, keeping its own sampling settings), built into the model
    cache where missing."""
    from coevolve.config import LocalTeacherConfig, load_config
    from coevolve.stages.warm_start.build import build_warm_starts, with_warm_starts

    source, overrides = TEACHERS[teacher]
    spec = config if source is None else load_config(source, list(overrides))
    named = with_warm_starts(spec)
    build_warm_starts(spec, named)
    if source is None:
        return named
    model = config.model.model_copy(update={"name": named.model.name})
    sampling = config.teacher.model_dump(exclude={"type"})
    teacher = LocalTeacherConfig(
        model=named.teacher.model, dtype=model.dtype, device=model.device, **sampling
    )
    return config.model_copy(update={"model": model, "teacher": teacher})


def models(named: Any) -> tuple[Any, Any]:
    """(teacher, policy) of a config whose starts are built (`started`)."""
    from coevolve.agents.teacher import make_teacher, teacher_version
    from coevolve.llm.chat import ChatFormat
    from coevolve.llm.hf_engine import HfEngine
    from coevolve.llm.models import load_model

    model, tokenizer = load_model(named.model.name, dtype=named.model.dtype, device=named.model.device)
    engine = HfEngine(
        model, tokenizer, batch_size=named.model.generation_batch_size, version=named.model.name
    )
    policy = SimpleNamespace(engine=engine, chat=ChatFormat(tokenizer), version=named.model.name)
    teacher = make_teacher(named.teacher, lambda: policy, teacher_version(named.teacher, policy.version))
    return teacher, policy


def main(argv: Sequence[str] | None = None, doc: str | None = None) -> None:
    """The benchmark's command line; `doc`: the package's docstring, the help's epilog."""
    parser = argument_parser("explore-yield", doc)
    parser.add_argument("--teacher", choices=list(TEACHERS), default="coverage")
    parser.add_argument("--variant", choices=list(VARIANTS), default="control")
    parser.add_argument("--worlds", type=int, default=1, help="validation worlds per gap tool and round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each over worlds drawn anew")
    parser.add_argument(
        "--attempts",
        type=int,
        default=1,
        help="verify.attempts: policy attempts per checked candidate (they decide nothing under "
        "verify.judge: execution)",
    )
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another config override (repeatable)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="folder of the rows and page (default: the results' explore-yield/<teacher>-<variant>/)",
    )
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    if args.worlds < 1 or args.rounds < 1 or args.attempts < 1:
        parser.error("--worlds, --rounds and --attempts must be >= 1")
    command, commit = command_line("explore-yield", argv), current_commit()
    config = load(args.config, args.teacher, args.variant, [f"verify.attempts={args.attempts}", *args.sets])
    clock = time.perf_counter()
    config = started(config, args.teacher)
    teacher, policy = models(config)
    rows = measure(config, teacher, policy, variant=args.variant, worlds=args.worlds, rounds=args.rounds)
    from coevolve.benchmarks.explore_yield.record import write_record

    out = args.out or results_dir() / "explore-yield" / f"{args.teacher}-{args.variant}"
    note = (
        f"{len(rows)} explorations ({args.worlds} validation worlds per gap tool, {args.rounds} round(s)) in "
        f"{time.perf_counter() - clock:.0f} s; teacher {config.teacher.model}, policy {config.model.name}"
        + (f"; {args.note}" if args.note else "")
    )
    row = write_record(rows, list(config.gap_families), teacher=args.teacher, variant=args.variant,
                       command=command, out=out, note=note, commit=commit)  # fmt: skip
    print((out / "report.md").read_text())
    print(f"recorded: {row['figures']['threshold met']}", flush=True)
