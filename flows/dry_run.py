"""`coevolve run CONFIG --dry-run`: what a run would do, before it does anything.

The config is validated as a run would validate it (`flows.validate.check_run_config`: models, environment,
splits), then the plan is printed: rounds and the rounds that evolve (with the signal kinds they extract
and the verdicts merge admits, as the phases' contracts name them), where D_0 comes from, the held-out
splits, the budget (rollout episodes, optimizer steps, evaluation episodes, an upper bound on generated
tokens) and every setting that differs from the paper's or extends it, each labelled deviation or extension
(`coevolve.config.paper`, the table docs/reproduce.md renders), so a GPU user knows what a match with the
paper's numbers would mean. Last, what this machine lacks that the run needs where it runs (`flows.preflight`:
a model, device or storage root that cannot work is refused; one that is only absent here is a warning).

Of a run that has begun (`coevolve run --run NAME --dry-run`, with `--rounds` or `--more` as the run would get
them) it plans the rounds the run would cover (`flows.runs.rounds_to_run`: never fewer than it completed nor
than its last stale stage, whatever the saved `run.rounds`), and says how many it completed, which stale
stages it recomputes and which rounds it adds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.config import CoevolveConfig
from coevolve.config.paper import SETTINGS, Equals, differences
from coevolve.contracts.signals import signal_kind
from coevolve.stages.round_plan import evolves


def _has(path: str) -> bool:
    try:
        CoevolveConfig().value(path)
    except KeyError:
        return path.startswith("teacher.")  # another backend's field: present when that backend is chosen
    return True


_FIELDS = {s.path for s in SETTINGS if _has(s.path)}

EXTENSIONS: dict[str, tuple[Any, str]] = {
    s.path: (s.matches.expected, s.why) for s in SETTINGS
    if s.label == "extension" and isinstance(s.matches, Equals) and s.path in _FIELDS
}
"""The extensions with a plain value that turns each off (`coevolve.config.paper`, the one table)."""


def dry_run(config: CoevolveConfig, root: Path | None = None, *, run: str | None = None, rounds: int | None = None,
            more: int | None = None) -> str:  # fmt: skip
    """The plan of run `run` (default `run.name`) of `config` under storage root `root`, validated
    (`ConfigError` naming the field otherwise), with what this machine lacks that the run would need
    (`flows.preflight`). `rounds` (the total) or `more` (beyond the completed ones) as `coevolve run` takes
    them; an existing run under `root` is planned as continuing (`RunError` for a bad `rounds`/`more`)."""
    from coevolve.flows.preflight import preflight
    from coevolve.flows.validate import check_run_config

    check_run_config(config)
    warnings = preflight(config, root)
    name = run or config.run.name
    total, progress = _covered(config, root, name, rounds, more)
    lines = [f"run {name}: {total} rounds, policy {config.model.name} on {config.env.name}", *progress]
    evolving = [r for r in range(total) if evolves(config, r)]
    lines.append(f"  data evolution after rounds: {', '.join(map(str, evolving)) or 'none (plain GRPO)'}")
    if evolving:
        kinds = ", ".join(f"{k} ({signal_kind(k).about})" for k in config.signals.kinds)
        lines.append(f"  signals: {kinds}; merged verdicts: {', '.join(config.merge.admit)}")
    lines.append(f"  D_0: {_d0(config)}")
    sizes, unlisted = _split_sizes(config)
    warnings += [unlisted] if unlisted else []
    shown = ", ".join(f"{s} ({sizes.get(s, '?')} tasks)" for s in config.eval.splits) or "none"
    lines.append(f"  held out: {shown}; every {config.eval.every} rounds{', baseline first' if config.eval.baseline else ''}")
    lines += [f"  budget: {line}" for line in _budget(config, sizes, total)]
    found = sorted(differences(config), key=lambda d: not d.setting.stated)  # stated values first
    deviations = [d.line() for d in found if d.setting.label == "deviation"]
    extensions = [d.line() for d in found if d.setting.label == "extension"]
    lines += ["  differs from the paper:", *(f"    {d}" for d in deviations or ["nothing"])]
    lines += ["  extensions (not in the paper):", *(f"    {e}" for e in extensions or ["none"])]
    lines += ["  warnings (not here, needed where the run runs):", *(f"    {w}" for w in warnings)] if warnings else []
    return "\n".join(lines)


def _covered(config: CoevolveConfig, root: Path | None, run: str, rounds: int | None,
             more: int | None) -> tuple[int, list[str]]:  # fmt: skip
    """The total rounds `coevolve run` would take the run to (`flows.runs.rounds_to_run`), and for a run that
    has completed rounds a line saying what that continues: the stale stages it recomputes, the rounds it
    adds. Without a storage root: `rounds`, else `run.rounds`."""
    if root is None:
        return rounds or config.run.rounds, []
    from coevolve.flows.run_context import open_run
    from coevolve.flows.runs import completed_rounds, rounds_to_run
    from coevolve.storage.staleness import stale_stages

    ctx = open_run(config, run, root, quiet=True)
    total, done = rounds_to_run(ctx, rounds, more), completed_rounds(ctx)
    if not done:
        return total, []
    stale = [(stage, round_) for stage, round_, _ in stale_stages(ctx.store.layout.run_dir)]
    covered = [s for s in stale if s[1] < total]
    line = f"  continues: {done} round{'s' if done != 1 else ''} completed"
    if covered:
        first = min(round_ for _, round_ in covered)
        line += f"; recomputes {len(covered)} stale stage{'s' if len(covered) != 1 else ''} from round {first}"
    if len(covered) < len(stale):
        line += f"; {len(stale) - len(covered)} stale stages of rounds >= {total} stay stale"
    new = f"round {done}" if total == done + 1 else f"rounds {done}..{total - 1}"
    return total, [line + (f"; adds {new}" if total > done else "; adds no round")]


def _d0(config: CoevolveConfig) -> str:
    data = config.dataset
    parts = []
    if data.seed_split:
        size = f"{data.max_tasks} tasks" if data.max_tasks else "all tasks"
        parts.append(f"{size} of split {data.seed_split} (sample seed {config.d0_sample_seed}; a sampled twin of "
                     f"an evaluation task left out)")
    if data.bootstrap_tasks:
        parts.append(f"up to {data.bootstrap_tasks} tasks explored in {data.bootstrap_worlds} worlds of split "
                     f"{data.bootstrap_split}")  # fmt: skip
    return " + ".join(parts)


def _split_sizes(config: CoevolveConfig) -> tuple[dict[str, int], str | None]:
    """Tasks per held-out split (capped by `eval.max_tasks`), where the environment can list them here; else
    no sizes and a warning saying why."""
    from coevolve import envs

    try:
        env = envs.make(config.env.name, **config.env.options)
        sizes = {split: len(env.tasks(split)) for split in config.eval.splits}
    except Exception as exc:  # an environment behind a server that is not up: sizes unknown, the plan still shown
        return {}, (f"env: {config.env.name} cannot list its tasks here ({type(exc).__name__}: {exc}); the run "
                    f"lists them first and stops if it cannot")  # fmt: skip
    cap = config.eval.max_tasks
    return {split: min(n, cap) if cap else n for split, n in sizes.items()}, None


def _budget(config: CoevolveConfig, sizes: dict[str, int], rounds: int) -> list[str]:
    rollout, train, evaluation = config.rollout, config.train, config.eval
    episodes = rounds * rollout.tasks_per_round * rollout.k
    tokens = episodes * rollout.max_replies * rollout.max_new_tokens
    evaluations = (sum(1 for r in range(rounds) if evaluation.every and (r + 1) % evaluation.every == 0)
                   + int(evaluation.baseline and evaluation.every > 0))  # fmt: skip
    held_out = (f"{evaluations * sum(sizes.values()) * evaluation.samples} evaluation episodes "
                f"({evaluations} evaluations x {sum(sizes.values())} tasks x {evaluation.samples})"
                if len(sizes) == len(config.eval.splits) else f"{evaluations} evaluations (split sizes unknown)")  # fmt: skip
    return [
        f"{episodes} rollout episodes ({rounds} rounds x {rollout.tasks_per_round} tasks x K = {rollout.k}), "
        f"at most {tokens:,} generated tokens",
        f"{rounds * train.mini_batches * train.epochs} optimizer steps ({train.mini_batches} per epoch x "
        f"{train.epochs} epoch{'s' if train.epochs != 1 else ''} per round"
        + ("; one step per batch: the ratio is 1 and the clip never acts)" if train.mini_batches * train.epochs == 1
           else ")"),
        held_out,
    ]
