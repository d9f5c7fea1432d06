"""The paper's setting, field by field: the one source of what a config changes relative to the paper.

Each `Setting` names a config field, the paper's value (or what the paper says of it), whether a config
that differs is a *deviation* (the paper does it another way, or gives no value and one is chosen here) or
an *extension* (something the paper does not have, with the value that turns it off), and one line on what
the difference does. `coevolve run CONFIG --dry-run` prints every row a config differs on
(`differences`); docs/reproduce.md's table is this table rendered for the shipped paper configs
(`python -m coevolve.config.paper`, checked by `tests/unit/test_paper_settings.py`). The paper's own
account is docs/paper.md.

A field the config does not have (a teacher backend's field under another backend, a field not added yet)
is skipped. `NOT_PAPER_SETTINGS` lists the fields that say where or how fast a run runs, not what it
computes; every other config field has a row here (a test walks the config's fields).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from coevolve.contracts.signals import paper_kinds
from coevolve.contracts.verify import ADMITTED

if TYPE_CHECKING:
    from coevolve.config.models import CoevolveConfig

PAPER_N = 100
"""N: D_0's tasks from unguided exploration."""
PAPER_F = 10
"""F: GRPO steps between evolutions (the paper's default)."""
PAPER_F_SWEEP = (2, 40)
"""The paper's other F values: 2 (slightly better, costlier) and 40 (worse)."""
PAPER_SIGNALS = paper_kinds()
PAPER_EVAL_SPLITS = {"bfcl": ("all",), "appworld": ("test_normal", "test_challenge")}
"""The tasks the paper scores: BFCL's 200 `multi_turn_base` tasks (this project's split `all`), AppWorld's
Test-N and Test-C."""
PAPER_BACKBONES = ("qwen2.5-7b", "qwen3-4b", "qwen3-30b-a3b")

Label = Literal["deviation", "extension"]
Match = Callable[[Any, "CoevolveConfig"], bool]


@dataclass(frozen=True)
class Setting:
    """One config field against the paper."""

    path: str
    """Dotted config field."""
    paper: str
    """What the paper has, as shown beside the config's value."""
    label: Label
    """`deviation`: the paper does it otherwise or gives no value; `extension`: not in the paper."""
    why: str
    """One line: what a config that differs does (and how to get the paper's setting, where it exists)."""
    matches: Match
    """True when the config's value is the paper's (never, where the paper gives no value)."""
    applies: Callable[[CoevolveConfig], bool] = lambda config: True
    """Whether the field means anything in this config (e.g. LoRA's alpha without LoRA does not)."""

    @property
    def stated(self) -> bool:
        """The paper states a value (else any value is chosen here)."""
        return self.matches is not not_given


@dataclass(frozen=True)
class Difference:
    setting: Setting
    value: Any

    def line(self) -> str:
        s = self.setting
        return f"{s.label}: {s.path} = {_shown(self.value)} (paper: {s.paper}): {s.why}"


@dataclass(frozen=True)
class Equals:
    """The paper's (or, for an extension, the turned-off) value of a field."""

    expected: Any

    def __call__(self, value: Any, config: CoevolveConfig) -> bool:
        return value == self.expected


_is = Equals


def not_given(value: Any, config: CoevolveConfig) -> bool:
    return False  # the paper gives no value: whatever a config sets was chosen here


def _backbone(value: str, config: CoevolveConfig) -> bool:
    name = value.rsplit("/", 1)[-1].lower().removesuffix("-instruct")
    return name in PAPER_BACKBONES


def _paper_splits(value: tuple[str, ...], config: CoevolveConfig) -> bool:
    return tuple(value) == PAPER_EVAL_SPLITS.get(config.env.name)


def _bootstraps(config: CoevolveConfig) -> bool:
    return config.dataset.bootstrap_tasks > 0


def _lora(config: CoevolveConfig) -> bool:
    return config.train.lora_rank > 0


def _evolves(config: CoevolveConfig) -> bool:
    return config.evolve.every > 0


NOT_GIVEN = "not given"
DEV, EXT = "deviation", "extension"

SETTINGS: tuple[Setting, ...] = (
    # what is trained, on what, scored how
    Setting("model.name", "Qwen3-4B (also Qwen2.5-7B, Qwen3-30B-A3B)", DEV,
            "a backbone the paper did not train", _backbone),
    Setting("env.name", "bfcl or appworld", DEV, "not one of the paper's two benchmarks",
            lambda value, config: value in PAPER_EVAL_SPLITS),
    Setting("eval.splits", "BFCL: all 200 multi_turn_base tasks (split all); AppWorld: test_normal, "
            "test_challenge", DEV, "scored on other tasks: BFCL's ae-test is 100 of the 200, sampling error "
            "about 4.8 points at 63 % (3.4 on 200)", _paper_splits),
    Setting("eval.max_tasks", "every task of the split", DEV, "a sample of each split is scored", _is(None)),
    Setting("eval.every", NOT_GIVEN, DEV, "how often the policy is scored; the last evaluation is the figure",
            not_given),
    Setting("eval.greedy", NOT_GIVEN, DEV, "greedy decoding, one episode per task, when true", not_given),
    Setting("eval.samples", "one score per task", DEV, "a task's score is the mean of several sampled episodes",
            _is(1)),
    Setting("dataset.seed_split", "none: D_0 is the N explored tasks only", DEV,
            "D_0 also holds this split's human-written tasks (BFCL ae-train: 100; AppWorld train: 90); "
            "dataset.seed_split=null gives the paper's D_0", _is(None)),
    Setting("dataset.max_tasks", "-", DEV, "a sample of the seed split's tasks", _is(None),
            applies=lambda config: config.dataset.seed_split is not None),
    Setting("dataset.bootstrap_tasks", f"N = {PAPER_N}", DEV,
            "another D_0 size; only verified tasks enter, so D_0 may hold fewer", _is(PAPER_N)),
    Setting("dataset.bootstrap_split", "not said which worlds", DEV,
            "D_0 is explored in this split's worlds only (never an evaluation world)", not_given,
            applies=_bootstraps),
    Setting("dataset.bootstrap_worlds", NOT_GIVEN, DEV, "worlds explored to find D_0's tasks", not_given,
            applies=_bootstraps),
    Setting("run.rounds", NOT_GIVEN, DEV, "the training length in GRPO steps", not_given),
    # rollouts
    Setting("rollout.k", "K = 8", DEV, "another GRPO group size", _is(8)),
    Setting("rollout.tasks_per_round", NOT_GIVEN, DEV, "tasks per GRPO step", not_given),
    Setting("rollout.temperature", NOT_GIVEN, DEV, "the rollouts' sampling temperature", not_given),
    Setting("rollout.top_p", "plain sampling", DEV, "nucleus sampling: the trainer scores another distribution",
            _is(1.0)),
    Setting("rollout.max_new_tokens", NOT_GIVEN, DEV, "rollout cap: tokens per reply", not_given),
    Setting("rollout.max_replies", NOT_GIVEN, DEV, "rollout cap: an episode that hits it fails", not_given),
    Setting("rollout.max_context_tokens", NOT_GIVEN, DEV, "rollout cap: an episode that outgrows it ends",
            not_given),
    Setting("rollout.newest_share", "0: one weighted draw", EXT,
            "a share of each round's draws reserved for the newest admitted tasks", _is(0.0)),
    Setting("rollout.max_staleness", "0: synchronous, on-policy", EXT,
            "round r samples with the policy after round r-1-s while the update of round r-1 trains "
            "(prime-rl's max_off_policy_steps)", _is(0)),
    # the update
    Setting("model.dtype", NOT_GIVEN, DEV, "the weights' dtype in training and generation", not_given),
    Setting("train.lora_rank", "not said (full fine-tuning or LoRA)", DEV,
            "LoRA of this rank when > 0, else every weight trained", not_given),
    Setting("train.lora_alpha", NOT_GIVEN, DEV, "LoRA's scale numerator", not_given, applies=_lora),
    Setting("train.lr", NOT_GIVEN, DEV, "the learning rate", not_given),
    Setting("train.weight_decay", NOT_GIVEN, DEV, "AdamW's weight decay", not_given),
    Setting("train.max_grad_norm", NOT_GIVEN, DEV, "gradient clipping", not_given),
    Setting("train.mini_batches", NOT_GIVEN, DEV,
            "optimizer steps per epoch of a round; with one step in all the ratio is 1 and the clip never acts",
            not_given),
    Setting("train.epochs", NOT_GIVEN, DEV, "passes over a round's samples", not_given),
    Setting("train.clip_low", "one epsilon, value not given", DEV, "the PPO clip's epsilon", not_given),
    Setting("train.clip_high", "= clip_low (one epsilon)", EXT, "clip-higher (DAPO): a wider upper clip",
            lambda value, config: value == config.train.clip_low),
    Setting("train.beta", "a KL term, weight not given", DEV, "the KL penalty's weight (k3 estimator)",
            not_given),
    Setting("train.beta", "> 0 (a KL term)", EXT,
            "no KL term: zero-advantage rows left out of the update and of the loss's token counts",
            lambda value, config: value > 0),
    Setting("train.loss_normalization", "group_tokens (over each group's policy tokens)", DEV,
            "another normalisation of the token-level loss", _is("group_tokens")),
    Setting("train.scale_rewards", "group: A = (R - mean) / std within the group", EXT,
            "advantages scaled otherwise", _is("group")),
    Setting("train.drop_zero_std_groups", "false", EXT, "equal-reward groups left out (dynamic sampling)",
            _is(False)),
    Setting("train.vllm_importance_sampling_correction", "none: the sampler's log-probs are not compared", EXT,
            "the server's samples weighed by trainer / engine probability (TRL's; unset: on where a server "
            "generates)", lambda value, config: not config.train.importance_sampling_on(bool(config.model.servers))),
    Setting("train.lr_scheduler_type", "constant", EXT, "a learning-rate schedule", _is("constant")),
    Setting("train.warmup_steps", "0", EXT, "linear warmup steps", _is(0)),
    Setting("train.warmup_ratio", "0", EXT, "a share of the schedule warming up", _is(0.0)),
    # the evolution
    Setting("evolve.every", f"F = {PAPER_F} ({' and '.join(map(str, PAPER_F_SWEEP))} in its sweep)", DEV,
            "another evolution interval; 0 is plain GRPO (the paper's GRPO column)", _is(PAPER_F)),
    Setting("evolve.curriculum", "teacher", DEV, "not CoEvolve: an oracle draws new tasks", _is("teacher")),
    Setting("evolve.last_round", "every F-th round", EXT, "evolution stops before the run ends", _is(None)),
    Setting("evolve.verify_after_update", "false", EXT, "the round's evolution runs after its update",
            _is(False)),
    Setting("signals.kinds", "forgetting, boundary, rare", DEV,
            "a signal left out (the paper's ablation: without forgetting 45.18, rare 47.21, boundary 47.17)",
            lambda value, config: set(PAPER_SIGNALS) <= set(value), applies=_evolves),
    Setting("signals.kinds", "forgetting, boundary, rare", EXT, "a kind beyond the paper's three",
            lambda value, config: set(value) <= set(PAPER_SIGNALS), applies=_evolves),
    Setting("signals.window", "W = 10", DEV, "another forgetting and rare window", _is(10), applies=_evolves),
    Setting("signals.rare_theta", "theta = 5 %", DEV, "another rare threshold", _is(5.0), applies=_evolves),
    Setting("signals.rare_pattern", "two readings: a rarely drawn task (the seed summary), or an action "
            "pattern under theta % of the window's actions (the reading note)", DEV, "which reading this "
            "config counts: task is the seed summary's, tool and bigram the note's (docs/paper.md)", not_given,
            applies=_evolves),
    Setting("signals.forgetting_score", "success: s >= 0.5 in a round", DEV,
            "forgetting scores a round by its mean reward (partial credit can fire it)", _is("success"),
            applies=_evolves),
    Setting("signals.rare_unused", "false", EXT, "offered-but-unused tools count as rare", _is(False),
            applies=_evolves),
    Setting("explore.guided", "true", DEV, "exploration from random worlds (the '+ random exploration' row)",
            _is(True), applies=_evolves),
    Setting("explore.max_explorations", NOT_GIVEN, DEV, "explorations per evolution", not_given,
            applies=_evolves),
    Setting("explore.rounds", "multi-round, count not given", DEV, "R: episodes per exploration context",
            not_given, applies=_evolves),
    Setting("explore.steps", "multi-step, count not given", DEV, "S: teacher replies per episode", not_given,
            applies=_evolves),
    Setting("explore.follow_ups", "0", EXT, "follow-up turns asking to explore beyond the request", _is(0),
            applies=_evolves),
    Setting("explore.allotment", "none given (priority: kind order, then newest)", EXT,
            "explorations shared out otherwise", _is("priority"), applies=_evolves),
    Setting("explore.named_tool_context", "false", EXT, "the exploration context names a tool to try",
            _is(False), applies=_evolves),
    Setting("explore.prefill_named_tool", "false", EXT, "the teacher's reply is started with the named tool",
            _is(False), applies=_evolves),
    Setting("explore.prefill_arguments", "false", EXT, "the prefilled call opens its first argument",
            _is(False), applies=_evolves),
    Setting("explore.prefill_listing_first", "false", EXT, "the listing's call prefilled before the named tool's",
            _is(False), applies=_evolves),
    Setting("explore.prefill_listing_call", "false", EXT, "the listing's whole call is the first reply",
            _is(False), applies=_evolves),
    Setting("abstract.samples", "one abstraction per group", DEV, "several teacher replies per triple group",
            _is(1), applies=_evolves),
    Setting("abstract.max_tasks_per_group", NOT_GIVEN, DEV, "tasks abstracted from one group", not_given,
            applies=_evolves),
    Setting("abstract.single_calls", "false", EXT, "each call of a group abstracted alone too", _is(False),
            applies=_evolves),
    Setting("abstract.prefill_effect", "false", EXT, "a one-call group's reply started by what the call did",
            _is(False), applies=_evolves),
    Setting("abstract.prefill_question", "false", EXT, "a read-only call's task opened as a question naming "
            "its values", _is(False), applies=_evolves),
    Setting("verify.enabled", "true", DEV, "candidates admitted unverified (the no-verification ablation)",
            _is(True), applies=_evolves),
    Setting("verify.judge", "execution", DEV, "the policy's attempts decide (this project's earlier reading)",
            _is("execution"), applies=_evolves),
    Setting("verify.grounding", "no such check", EXT, "a query's literals must be used by its solution",
            _is(0.0), applies=_evolves),
    Setting("merge.admit", "accept, retain", DEV, "other verdicts admitted",
            lambda value, config: tuple(value) == ADMITTED, applies=_evolves),
    Setting("merge.signal_weight", "1 (no weights)", EXT, "signal-linked tasks drawn more or less often",
            _is(1.0), applies=_evolves),
    Setting("merge.unsolved_weighting", "false", EXT, "admitted tasks weighted by verification failures",
            _is(False), applies=_evolves),
    # the teacher
    Setting("teacher.type", "openai: a strong LLM apart from the policy", DEV,
            "policy: the policy explores itself (the weaker-explorer ablation, BFCL 56.5); local: a fixed "
            "checkpoint", _is("openai")),
    Setting("teacher.model", "a strong LLM, not named", DEV, "the teacher's strength moves the CoEvolve column",
            not_given),
    # supervised starts (not in the paper)
    Setting("warm_start.policy_tasks", "0: RL starts from the base model", DEV,
            "the policy starts fine-tuned on reference solutions", _is(0)),
    Setting("warm_start.teacher_tasks", "0: a strong LLM teaches", DEV,
            "a teacher of its own, fine-tuned from the policy's start", _is(0)),
    Setting("warm_start.teacher_named_tool_examples", "false", EXT,
            "the teacher's start also learns to name tools", _is(False)),
)
"""Every config field that changes what a run computes, against the paper (docs/paper.md)."""

NOT_PAPER_SETTINGS: dict[str, str] = {
    "run.name": "a name", "run.seed": "a seed", "model.device": "where", "model.generation_batch_size": "speed",
    "model.servers": "where", "model.served_name": "a name", "model.api_key_env": "credentials",
    "env.options": "the environment's own options (BFCL's category, AppWorld's server and partial credit)",
    "dataset.sample_seed": "a seed", "eval.baseline": "the zero-shot column, when true",
    "eval.max_live_episodes": "memory", "train.micro_batch_size": "memory", "train.keep_checkpoints": "disk",
    "train.accelerate_config": "where", "train.shared_prefix": "speed",
    "train.schedule_rounds": "the horizon of a schedule (an extension row of its own)",
    "train.fixed_tokens": "the divisor of loss_normalization: fixed_tokens (a deviation row of its own)",
    "train.vllm_importance_sampling_mode": "how the correction weighs (an extension row of its own)",
    "train.vllm_importance_sampling_cap": "how the correction weighs (an extension row of its own)",
    "abstract.duplicate_jaccard": "deduplication", "verify.attempts": "recorded, decides only under judge: policy",
    "verify.greedy": "recorded attempts' decoding", "verify.contamination_jaccard": "split hygiene",
    "teacher.temperature": "teacher sampling", "teacher.max_new_tokens": "teacher caps",
    "teacher.step_max_new_tokens": "teacher caps", "teacher.max_context_tokens": "teacher caps",
    "teacher.base_url": "where", "teacher.api_key_env": "credentials", "teacher.tokenizer": "rendering",
    "teacher.token_ids": "transport", "teacher.timeout_s": "transport", "teacher.max_retries": "transport",
    "teacher.dtype": "a local teacher's dtype", "teacher.device": "where",
    "storage.root": "where", "runtime.ray_address": "where", "runtime.ray_actor_cpus": "where",
    "tracking.report_to": "logging", "warm_start.epochs": "the start's training", "warm_start.lr": "the start's "
    "training", "warm_start.lora_rank": "the start's training", "warm_start.lora_alpha": "the start's training",
}  # fmt: skip
"""Config fields outside the paper's setting (where, how fast, names, credentials), each with a word on
why; with `SETTINGS`, every config field."""


def differences(config: CoevolveConfig) -> list[Difference]:
    """The rows `config` differs from the paper on, in table order; fields it does not have are skipped."""
    found = []
    for setting in SETTINGS:
        try:
            value = config.value(setting.path)
        except KeyError:  # another teacher backend's field, or a field this version does not have
            continue
        if setting.applies(config) and not setting.matches(value, config):
            found.append(Difference(setting, value))
    return found


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(str, value)) + "]"
    return "null" if value is None else str(value)


PAPER_CONFIGS = ("bfcl-qwen3-4b", "appworld-qwen3-4b")


def markdown_table(configs: tuple[str, ...] = PAPER_CONFIGS) -> str:
    """docs/reproduce.md's table: every row, the paper's value and each shipped config's ("= paper" where it
    matches, blank where the field means nothing there)."""
    from coevolve.config.loading import load_config

    loaded = [load_config(name) for name in configs]
    lines = ["| field | the paper | " + " | ".join(f"`{n}`" for n in configs) + " | label | what it does |",
             "|---|---|" + "---|" * len(configs) + "---|---|"]  # fmt: skip
    for setting in SETTINGS:
        cells = [_cell(setting, config) for config in loaded]
        if all(cell is None for cell in cells):
            continue
        shown = " | ".join(cell or "" for cell in cells)
        lines.append(f"| `{setting.path}` | {setting.paper} | {shown} | {setting.label} | {setting.why} |")
    return "\n".join(lines)


def _cell(setting: Setting, config: CoevolveConfig) -> str | None:
    try:
        value = config.value(setting.path)
    except KeyError:
        return None
    if not setting.applies(config):
        return "-"
    return "= paper" if setting.matches(value, config) else f"`{_shown(value)}`"


if __name__ == "__main__":
    print(markdown_table())
