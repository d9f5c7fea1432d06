"""`coevolve run CONFIG --dry-run`: what a run would do, before it does anything.

The config is validated as a run would validate it (`flows.validate.check_run_config`: models, environment,
splits), then the plan is printed: rounds and the rounds that evolve, where D_0 comes from, the held-out
splits, the budget (rollout episodes, optimizer steps, evaluation episodes, an upper bound on generated
tokens) and every setting that differs from the paper's (`PAPER`) or extends it (`EXTENSIONS`), so a GPU
user knows what a match with the paper's numbers would mean (docs/reproduce.md).
"""

from __future__ import annotations

from typing import Any

from coevolve.config import CoevolveConfig
from coevolve.stages.plan import evolves

PAPER: dict[str, tuple[Any, str]] = {
    "evolve.every": (10, "F, the evolution interval"),
    "signals.window": (10, "W, the forgetting and rare window"),
    "signals.rare_theta": (5.0, "theta, the rare threshold"),
    "dataset.bootstrap_tasks": (100, "N, D_0's tasks from unguided exploration"),
    "verify.enabled": (True, "environment verification"),
    "verify.judge": ("execution", "who decides a verdict (docs/algorithm.md)"),
    "evolve.curriculum": ("teacher", "where new tasks come from"),
    "explore.guided": (True, "signal-guided exploration"),
    "train.loss_normalization": ("group_tokens", "a task's rollouts' loss over their own tokens"),
}
"""Settings the paper fixes: their values, and what they are."""

EXTENSIONS: dict[str, tuple[Any, str]] = {
    "signals.rare_unused": (False, "offered-but-unused tools counted as rare"),
    "rollout.newest_share": (0.0, "share of a round's draws reserved for the newest admitted tasks"),
    "merge.unsolved_weighting": (False, "admitted tasks weighted by the share of verification attempts failed"),
    "evolve.verify_after_update": (False, "evolution after the round's update"),
    "explore.follow_ups": (0, "follow-up exploration turns beyond the request"),
    "evolve.last_round": (None, "evolution stops before the run ends"),
    "abstract.single_calls": (False, "each call of a group abstracted alone too"),
    "abstract.prefill_effect": (False, "a one-call group's reply started by what the call did"),
    "merge.signal_weight": (1.0, "sampling weight of signal-linked tasks"),
    "train.lr_scheduler_type": ("constant", "learning-rate schedule over the run's optimizer steps"),
    "train.warmup_steps": (0, "optimizer steps of linear warmup"),
    "train.warmup_ratio": (0.0, "share of the schedule's steps warming up"),
    "train.scale_rewards": ("group", "advantages divided by the group's reward spread"),
    "train.drop_zero_std_groups": (False, "groups with equal rewards left out of the update (dynamic sampling)"),
}
"""Settings that are not in the paper, with the value that turns each off."""


def dry_run(config: CoevolveConfig) -> str:
    """The plan of a run of `config`, validated (`ConfigError` naming the field otherwise)."""
    from coevolve.flows.validate import check_run_config

    check_run_config(config)
    lines = [f"run {config.run.name}: {config.run.rounds} rounds, policy {config.model.name} on {config.env.name}"]
    evolving = [r for r in range(config.run.rounds) if evolves(config, r)]
    lines.append(f"  data evolution after rounds: {', '.join(map(str, evolving)) or 'none (plain GRPO)'}")
    lines.append(f"  D_0: {_d0(config)}")
    sizes = _split_sizes(config)
    shown = ", ".join(f"{s} ({sizes.get(s, '?')} tasks)" for s in config.eval.splits) or "none"
    lines.append(f"  held out: {shown}; every {config.eval.every} rounds{', baseline first' if config.eval.baseline else ''}")
    lines += [f"  budget: {line}" for line in _budget(config, sizes)]
    differences = [f"{path} = {config.value(path)} (paper: {paper}; {what})"
                   for path, (paper, what) in PAPER.items() if config.value(path) != paper]  # fmt: skip
    extended = [f"{path} = {config.value(path)} ({what})"
                for path, (off, what) in EXTENSIONS.items() if config.value(path) != off]  # fmt: skip
    if config.train.clip_high != config.train.clip_low:
        extended.append(f"train.clip_high = {config.train.clip_high} (clip-high, DAPO; the paper has one epsilon, "
                        f"{config.train.clip_low})")  # fmt: skip
    if config.train.beta == 0:
        extended.append("train.beta = 0 (zero-advantage rows left out of the update and of the loss's token counts)")
    lines += ["  differs from the paper:", *(f"    {d}" for d in differences or ["nothing"])]
    lines += ["  extensions (not in the paper):", *(f"    {e}" for e in extended or ["none"])]
    return "\n".join(lines)


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


def _split_sizes(config: CoevolveConfig) -> dict[str, int]:
    """Tasks per held-out split (capped by `eval.max_tasks`), where the environment can list them here."""
    from coevolve import envs

    try:
        env = envs.make(config.env.name, **config.env.options)
        sizes = {split: len(env.tasks(split)) for split in config.eval.splits}
    except Exception:  # an environment behind a server that is not up: sizes unknown, the plan still shown
        return {}
    cap = config.eval.max_tasks
    return {split: min(n, cap) if cap else n for split, n in sizes.items()}


def _budget(config: CoevolveConfig, sizes: dict[str, int]) -> list[str]:
    rounds, rollout, train, evaluation = config.run.rounds, config.rollout, config.train, config.eval
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
