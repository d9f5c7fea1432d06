"""Which runs the learning benchmark makes: the arms, their overrides, the seeds, the shared starts.

Every arm is an ordinary run of the `coevolve` flow on one config with one set of overrides (`ARMS`);
`Plan` fixes the config, rounds, seeds, arms and the warm-started policy and teacher they all start from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from coevolve.rl.warm_start import WarmStart

ARMS: dict[str, tuple[str, ...]] = {
    "grpo": ("evolve.every=0",),
    "oracle-curriculum": ("evolve.curriculum=oracle",),
    "coevolve": (),
    "no-forgetting": ("signals.kinds=[boundary, rare]",),
    "no-boundary": ("signals.kinds=[forgetting, rare]",),
    "no-rare": ("signals.kinds=[forgetting, boundary]",),
    "no-verify": ("verify.enabled=false",),
    "unguided": ("explore.guided=false",),
}
QUICK_ARMS = ("grpo", "coevolve")
SEEDED_ARMS = ("grpo", "oracle-curriculum", "coevolve")
"""Arms that run every seed of the plan; the ablations run seed 0 only. `oracle-curriculum` is not CoEvolve:
the ceiling, fresh generator tasks of the families the signals point at (`evolution.curriculum`)."""
PHASES = {"validation": ("validation",), "final": ("test", "heldout-templates")}
"""Held-out splits each phase evaluates: every development decision on `validation`; `test` and
`heldout-templates` only for the final report of a frozen plan (`--freeze`, then `--final`)."""
QUICK_OVERRIDES = ("eval.max_tasks=8",)
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
    """Each arm starts as a fork of the grpo run of its seed (`runs.share_with_grpo`)."""
    teacher: WarmStart | None = TEACHER_BUILD
    """The evolving arms' teacher (`teacher.type: local`): the warm start fine-tuned on the teacher's
    abstraction and reflection replies for these many fresh tasks (`evolution.warm_start.teacher_checkpoint`);
    None: the config's teacher."""
    teacher_model: Path | None = None
    """The teacher checkpoint, once `runs.run_benchmark` has it."""
    phase: str = "validation"
    """Which held-out splits the runs evaluate (`PHASES`)."""

    @classmethod
    def make(cls, *, quick: bool, config: Path = DEFAULT_CONFIG, rounds: int | None = None,
             seeds: int | None = None, arms: Sequence[str] | None = None,
             overrides: Sequence[str] = (), warm_start_tasks: int = WarmStart.tasks,
             teacher_tasks: int = WarmStart.tasks, jobs: int = 1, share: bool = True,
             first_seed: int = 0, phase: str = "validation") -> Plan:  # fmt: skip
        """The full suite, or `quick`: grpo and coevolve, one seed, 2 rounds, 8 tasks per eval split."""
        unknown = sorted(set(arms or ()) - set(ARMS))
        if unknown:
            raise ValueError(f"unknown arms {unknown}; known: {', '.join(ARMS)}")
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
        seeds = seeds if seeds is not None else (1 if quick else 3)
        if not 0 <= first_seed < seeds:
            raise ValueError(f"first_seed must be in [0, seeds = {seeds}), got {first_seed}")
        rounds = rounds if rounds is not None else (2 if quick else _config_rounds(config))
        overrides = (*QUICK_OVERRIDES, *overrides) if quick else tuple(overrides)
        return cls(
            config=config,
            rounds=rounds,
            seeds=seeds,
            arms=tuple(arms) if arms else (QUICK_ARMS if quick else tuple(ARMS)),
            first_seed=first_seed,
            overrides=(*overrides, *_final_evaluation(config, rounds, overrides)),
            warm_start=WarmStart(tasks=warm_start_tasks) if warm_start_tasks else None,
            teacher=replace(TEACHER_BUILD, tasks=teacher_tasks) if teacher_tasks else None,
            jobs=jobs,
            share=share,
            phase=phase,
        )

    def reported_runs(self) -> list[tuple[str, int]]:
        """(arm, seed) pairs, seed by seed so that an early stop still has every arm of seed 0, grpo first
        so that the other arms of the seed can fork it."""
        return [
            (arm, seed)
            for seed in range(self.seeds)
            for arm in sorted(self.arms, key=list(ARMS).index)
            if seed == 0 or arm in SEEDED_ARMS
        ]

    def runs(self) -> list[tuple[str, int]]:
        """The (arm, seed) pairs this invocation runs: those of seeds >= `first_seed`."""
        return [(arm, seed) for arm, seed in self.reported_runs() if seed >= self.first_seed]


def _config_rounds(config: Path) -> int:
    from coevolve.config import load_config

    return load_config(config).run.rounds


def _final_evaluation(config: Path, rounds: int, overrides: Sequence[str]) -> tuple[str, ...]:
    """`eval.every={rounds}` when the config would not evaluate the last round (every arm is compared
    after it); nothing when it does."""
    from coevolve.config import load_config

    every = load_config(config, list(overrides)).eval.every
    return () if every and rounds % every == 0 else (f"eval.every={rounds}",)


def run_name(arm: str, seed: int) -> str:
    return f"learning-{arm}-s{seed}"


def run_overrides(plan: Plan, arm: str, seed: int) -> list[str]:
    """The config overrides of one run: its seed, its phase's held-out splits, the plan's, the arm's, and the
    evolving arms' teacher (arms that evolve with a teacher only)."""
    teacher = [] if arm in ("grpo", "oracle-curriculum") or plan.teacher_model is None else [
        "teacher.type=local", f"teacher.model={plan.teacher_model}"]  # fmt: skip
    splits = f"eval.splits=[{', '.join(PHASES[plan.phase])}]"
    return [f"run.seed={seed}", splits, *plan.overrides, *ARMS[arm], *teacher]
