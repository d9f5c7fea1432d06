"""Which runs the learning benchmark makes: the arms, their overrides, the seeds, the shared starts.

Every arm is an ordinary run of the `coevolve` flow on one config with one set of overrides (`ARMS`);
`Plan` fixes the config, rounds, seeds, arms and the warm-started policy and teacher they all start from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from coevolve.benchmarks.learning.paper_arms import PAPER_ARM_OVERRIDES, at_paper_setting
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
    "oracle-gap": ("evolve.curriculum=oracle-gap",),
    "coevolve-unused-rare": ("signals.rare_unused=true",),
    "coevolve-unused": ("signals.kinds=[forgetting, boundary, rare, unused]", "explore.allotment=round_robin",
                        "explore.named_tool_context=true", "explore.prefill_named_tool=true",
                        "warm_start.teacher_tasks=48", "warm_start.teacher_named_tool_examples=true"),
    "policy-veto": ("verify.judge=policy",),
    "synthetic-data": ("evolve.every=0", "dataset.bootstrap_tasks=16"),
    "weak-explorer": (),
    "evolve-often": ("evolve.every=1",),
    "evolve-rarely": ("evolve.every=4",),
}
ARM_MEANINGS: dict[str, str] = {
    "grpo": "GRPO on D_0, no data evolution (the paper's GRPO column)",
    "oracle-curriculum": "ceiling: fresh generator tasks of the families the signals point at",
    "coevolve": "CoEvolve as configured (the paper's '+ feedback' row)",
    "no-forgetting": "CoEvolve without forgetting signals",
    "no-boundary": "CoEvolve without boundary signals",
    "no-rare": "CoEvolve without rare signals",
    "no-verify": "CoEvolve admitting candidates unverified",
    "unguided": "exploration from random worlds, not signals (the paper's '+ random exploration' row)",
    "oracle-gap": "ceiling: fresh tasks of the coverage gap's families",
    "coevolve-unused-rare": "CoEvolve whose rare signal also counts tools offered and never called (extension)",
    "coevolve-unused": "CoEvolve with signals that name a tool no trajectory called, allotted round robin across "
                       "kinds, an exploration context holding that tool, its first call prefilled, and a teacher "
                       "taught to call a named unused training tool (extensions, issue 59 items 2-3)",
    "policy-veto": "CoEvolve whose verification discards what the policy cannot yet solve (earlier reading)",
    "synthetic-data": "N tasks synthesized once by unguided exploration into D_0 (16; the paper's 100 on a paper "
                      "config), then GRPO without evolution (the paper's '+ synthetic data' row)",
    "weak-explorer": "CoEvolve whose teacher is the policy itself, not the evolving arms' teacher (the paper's "
                     "weaker explorer LLM)",
    "evolve-often": "CoEvolve evolving every round (the paper's F = 2: more often than its default)",
    "evolve-rarely": "CoEvolve evolving every 4 rounds (the paper's F = 40: rarer than its default)",
}  # fmt: skip
"""What each arm stands for, printed with its overrides when it runs (the paper's rows where it has one)."""
TEACHERLESS_ARMS = ("grpo", "oracle-curriculum", "oracle-gap")
"""Arms that never ask a teacher (the evolving arms' teacher is not built for them)."""
OWN_TEACHER_ARMS = ("weak-explorer", "coevolve-unused")
"""Arms that evolve with the config's own teacher, not the one built for the evolving arms (`coevolve-unused`:
the run's `warm_start` section builds it, with the named-tool examples, from the plan's warm-started policy)."""
QUICK_ARMS = ("grpo", "coevolve")


@dataclass(frozen=True)
class Regime:
    """One experiment of the learning benchmark: its config, arms, the arms run at every seed (the others
    at seed 0 only), and the held-out splits of each phase (every development decision on the `validation`
    phase's; the `final` phase's only for the report of a frozen plan: `--freeze`, then `--final`)."""

    config: Path
    arms: tuple[str, ...]
    seeded: tuple[str, ...]
    phases: dict[str, tuple[str, ...]]
    prefix: str
    """Run names: `<prefix>-<arm>-s<seed>`."""
    endpoint: dict[str, str] | None = None
    """Per phase, the split the headline compares arms on (the pre-registered primary endpoint); None: all of
    the phase's splits together."""
    effect: float = 0.05
    """The difference to grpo the seeds must detect at power 0.8 (success-rate units), on the endpoint."""
    final_first_seed: int = 0
    """The `final` phase's seeds start here, so that no final run re-uses a pilot's seed (pilots: 0..)."""
    sealed_test: bool = False
    """A `final` run's invocation records the run (outcomes, per-run tables, audit rows) and writes no
    report, curve or result row: the final splits' figures are read once, by `--final --report-only`."""
    shared_baseline: bool = False
    """The warm start's baseline evaluation is computed once per plan and phase (in the grpo run of the
    phase's first seed) and every run forks it, carried between storage roots with `--baseline-from`."""


REGIMES = {
    "in-distribution": Regime(
        Path("configs/learning-smollm2.yaml"),
        ("grpo", "oracle-curriculum", "coevolve", "no-forgetting", "no-boundary", "no-rare", "no-verify", "unguided"),
        ("grpo", "oracle-curriculum", "coevolve"),
        {"validation": ("validation",), "final": ("test", "heldout-templates")},
        "learning",
    ),
    "ablation": Regime(
        Path("configs/learning-smollm2.yaml"),
        ("grpo", "synthetic-data", "unguided", "coevolve", "no-forgetting", "no-boundary", "no-rare", "no-verify",
         "weak-explorer", "evolve-often", "evolve-rarely"),
        ("grpo", "coevolve"),
        {"validation": ("validation",), "final": ("test", "heldout-templates")},
        "ablation",
    ),
    "coverage": Regime(
        Path("configs/coverage-smollm2.yaml"),
        ("grpo", "oracle-gap", "coevolve", "coevolve-unused-rare", "unguided", "policy-veto"),
        ("grpo", "oracle-gap", "coevolve", "coevolve-unused-rare"),
        {"validation": ("gap-validation", "validation"), "final": ("gap-test", "test", "heldout-templates")},
        "coverage",
        endpoint={"validation": "gap-validation", "final": "gap-test"},
        effect=0.15,
    ),
    "coverage-v2": Regime(
        Path("configs/coverage-v2-smollm2.yaml"),
        ("grpo", "oracle-gap", "coevolve", "coevolve-unused", "unguided"),
        ("grpo", "coevolve-unused"),
        {"validation": ("gap-validation", "validation"), "final": ("gap-test", "test", "heldout-templates")},
        "coverage2",
        endpoint={"validation": "gap-validation", "final": "gap-test"},
        effect=0.10,
        final_first_seed=100,
        sealed_test=True,
        shared_baseline=True,
    ),
}
"""`in-distribution`: does evolving the data beat GRPO on the training families (oracle-curriculum, not
CoEvolve, the ceiling: fresh tasks of the families the signals point at). `coverage`: does it teach the
families the training data never shows (oracle-gap, not CoEvolve, the ceiling: fresh tasks of the gap);
`coverage-v2` asks it again on gap families that need their tool, with the arm whose signals name the gap
(`coevolve-unused`), final seeds no pilot used, test sealed until the final report and one shared baseline.
`ablation`: the paper's ablation table on the in-distribution config (`ARM_MEANINGS` says which row each
arm stands for; its F sweep scaled to this config's default of evolving every 2 rounds)."""
PHASES = REGIMES["in-distribution"].phases
SEEDED_ARMS = REGIMES["in-distribution"].seeded
QUICK_OVERRIDES = ("eval.max_tasks=8",)
DEFAULT_CONFIG = REGIMES["in-distribution"].config
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
    abstraction and reflection replies for these many fresh tasks (`stages.warm_start.build.teacher_checkpoint`);
    None: the config's teacher."""
    teacher_model: Path | None = None
    """The teacher checkpoint, once `runs.run_benchmark` has it."""
    phase: str = "validation"
    """Which held-out splits the runs evaluate (the regime's `phases`)."""
    regime: str = "in-distribution"
    """Which experiment (`REGIMES`): its arms, seeded arms, splits per phase and run names."""

    @property
    def experiment(self) -> Regime:
        return REGIMES[self.regime]

    @property
    def seed_base(self) -> int:
        """The first seed of this phase's runs (`Regime.final_first_seed` in the final phase, else 0)."""
        return self.experiment.final_first_seed if self.phase == "final" else 0

    @property
    def endpoint(self) -> str | None:
        """The split the headline compares arms on in this phase (None: all splits together)."""
        return (self.experiment.endpoint or {}).get(self.phase)

    @classmethod
    def make(cls, *, quick: bool, config: Path | None = None, rounds: int | None = None,
             seeds: int | None = None, arms: Sequence[str] | None = None,
             overrides: Sequence[str] = (), warm_start_tasks: int = WarmStart.tasks,
             teacher_tasks: int = WarmStart.tasks, jobs: int = 1, share: bool = True,
             first_seed: int = 0, phase: str = "validation", regime: str = "in-distribution") -> Plan:  # fmt: skip
        """The full suite, or `quick`: grpo and coevolve, one seed, 2 rounds, 8 tasks per eval split."""
        if regime not in REGIMES:
            raise ValueError(f"regime must be one of {', '.join(REGIMES)}, got {regime!r}")
        experiment = REGIMES[regime]
        config = config if config is not None else experiment.config
        if at_paper_setting(config):  # the paper's arms start from the base model, with the config's teacher
            warm_start_tasks = teacher_tasks = 0
        unknown = sorted(set(arms or ()) - set(experiment.arms))
        if unknown:
            raise ValueError(f"unknown arms {unknown} in the {regime} regime; its arms: {', '.join(experiment.arms)}")
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        if phase not in experiment.phases:
            raise ValueError(f"phase must be one of {', '.join(experiment.phases)}, got {phase!r}")
        seeds = seeds if seeds is not None else (1 if quick else 3)
        if not 0 <= first_seed < seeds:
            raise ValueError(f"first_seed must be in [0, seeds = {seeds}), got {first_seed}")
        rounds = rounds if rounds is not None else (2 if quick else _config_rounds(config))
        overrides = (*QUICK_OVERRIDES, *overrides) if quick else tuple(overrides)
        return cls(
            config=config,
            rounds=rounds,
            seeds=seeds,
            arms=tuple(arms) if arms else (QUICK_ARMS if quick else experiment.arms),
            first_seed=first_seed,
            overrides=(*overrides, *_final_evaluation(config, rounds, overrides)),
            warm_start=WarmStart(tasks=warm_start_tasks) if warm_start_tasks else None,
            teacher=replace(TEACHER_BUILD, tasks=teacher_tasks) if teacher_tasks else None,
            jobs=jobs,
            share=share,
            phase=phase,
            regime=regime,
        )

    def reported_runs(self) -> list[tuple[str, int]]:
        """(arm, seed) pairs, seed by seed so that an early stop still has every arm of seed 0, grpo first
        so that the other arms of the seed can fork it."""
        base = self.seed_base
        return [
            (arm, seed)
            for seed in range(base, base + self.seeds)
            for arm in sorted(self.arms, key=list(ARMS).index)
            if seed == base or arm in self.experiment.seeded
        ]

    def run_name(self, arm: str, seed: int) -> str:
        return run_name(arm, seed, self.experiment.prefix)

    def runs(self) -> list[tuple[str, int]]:
        """The (arm, seed) pairs this invocation runs: those of seeds >= `first_seed` (counted from `seed_base`)."""
        return [(arm, seed) for arm, seed in self.reported_runs() if seed >= self.seed_base + self.first_seed]


def _config_rounds(config: Path) -> int:
    from coevolve.config import load_config

    return load_config(config).run.rounds


def _final_evaluation(config: Path, rounds: int, overrides: Sequence[str]) -> tuple[str, ...]:
    """`eval.every={rounds}` when the config would not evaluate the last round (every arm is compared
    after it); nothing when it does."""
    from coevolve.config import load_config

    every = load_config(config, list(overrides)).eval.every
    return () if every and rounds % every == 0 else (f"eval.every={rounds}",)


def run_name(arm: str, seed: int, prefix: str = "learning") -> str:
    return f"{prefix}-{arm}-s{seed}"


def run_overrides(plan: Plan, arm: str, seed: int) -> list[str]:
    """The config overrides of one run: its seed, its phase's held-out splits, the plan's, the arm's, and the
    evolving arms' teacher (arms that evolve with a teacher only)."""
    teacher = [] if arm in (*TEACHERLESS_ARMS, *OWN_TEACHER_ARMS) or plan.teacher_model is None else [
        "teacher.type=local", f"teacher.model={plan.teacher_model}"]  # fmt: skip
    if at_paper_setting(plan.config):  # the paper's N and F, on the config's own splits (paper_arms)
        return [f"run.seed={seed}", *plan.overrides, *PAPER_ARM_OVERRIDES.get(arm, ARMS[arm])]
    splits = f"eval.splits=[{', '.join(plan.experiment.phases[plan.phase])}]"
    return [f"run.seed={seed}", splits, *plan.overrides, *ARMS[arm], *teacher]
