"""Config sections of the data evolution: when it runs (`evolve`) and one section per phase, named as the
stage that reads it (`signals`, `explore`, `abstract`, `verify`, `merge`), so each stage's cache key covers
exactly the settings it uses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from coevolve.config.section import Section
from coevolve.contracts.signals import check_kinds, paper_kinds
from coevolve.contracts.verify import ADMITTED, VERDICTS

Verdicts = Literal[VERDICTS]  # type: ignore[valid-type]
"""A verification outcome (`coevolve.contracts.verify.Verdict`)."""

SIGNAL_KINDS = paper_kinds()
"""The paper's signal kinds, the default of `signals.kinds` (`coevolve.contracts.signals`, where every kind is
declared)."""


class EvolveConfig(Section):
    """When the data evolves (the phases' own settings are in their sections)."""

    every: int = Field(0, ge=0, le=1_000_000)
    """Run the data-evolution phases every F rounds (rounds F-1, 2F-1, ...); 0 = plain GRPO on the seed
    dataset."""
    last_round: int | None = Field(None, ge=0, le=1_000_000)
    """Extension, not the paper's: the last round that evolves (None: every F-th round of the run, as in the
    paper). What the final rounds' evolutions admit is drawn by no later rollout of the run, so a run can stop
    evolving early and train on the rest."""
    curriculum: Literal["teacher", "oracle", "oracle-gap"] = "teacher"
    """Where new tasks come from: `teacher` (CoEvolve: re-exploration and abstraction by the teacher LLM),
    `oracle` (NOT CoEvolve: the environment's generator draws fresh tasks of the families the signals point
    at, `stages.explore.curriculum`; the in-distribution learning benchmark's ceiling arm) or `oracle-gap` (NOT
    CoEvolve: fresh tasks of the coverage gap, the families of the environment option `gap_families`, in
    turn; the coverage experiment's ceiling arm)."""
    verify_after_update: bool = False
    """Extension, not the paper's: run the round's data evolution after its GRPO update, so verification
    attempts (and `merge.unsolved_weighting` grades) a candidate with the policy that will draw it, not the
    one before the update, which has not yet trained on the boundary task the candidate was explored from. A
    policy teacher (`teacher.type: policy`) is then the updated policy too. Off: evolution runs beside the
    update, both on the round's rollouts."""


class SignalsConfig(Section):
    """Weakness signals over the rollout ledger (stage `signals`)."""

    kinds: tuple[str, ...] = SIGNAL_KINDS
    """Signal kinds that are extracted, and the order in which they are explored (first = most urgent), each a
    kind `coevolve.contracts.signals` declares. The paper's are forgetting, boundary and rare (the default).
    `unused` is an extension, not the paper's: a tool the round's episodes offer that no trajectory of the
    last W rounds called, one signal per tool, on one round-r trajectory that was offered it
    (`stages.signals.rules.unused_signals`)."""
    window: int = Field(10, ge=1, le=10_000)
    """W: forgetting looks at a task's last W attempted rounds; rare and unused look at the last W rounds."""
    rare_theta: float = Field(5.0, ge=0.0, le=100.0)
    """Rare: a pattern is rare when 0 < count / N < theta / 100."""
    rare_pattern: Literal["tool", "bigram", "task"] = "tool"
    """What the rare rule counts. `tool` (the paper configs' reading, the public reading note's: an action
    pattern p with 0 < c_p / N < theta / 100 over the window's N actions): single tool names; `bigram`:
    pairs of consecutive calls. `task` is the other reading of the paper, the seed summary's: a task that
    appears with very low frequency in the current training distribution, c_p its rollouts among the N
    rollouts of the window; its round-r trajectories are marked."""
    rare_unused: bool = False
    """Extension, not the paper's, superseded by the `unused` kind (kept for the recorded coverage
    experiment's `coevolve-unused-rare` arm): a tool the round's tasks offer that no action of the window
    called is rare too (count 0), marking the trajectories that were offered it, folded into the rare rows
    where they lose to the other kinds. Tool patterns only."""
    forgetting_score: Literal["success", "mean_reward"] = "success"
    """A task's round score s for forgetting (fires when some s of its last W attempted rounds is >= 0.5 and
    the current s < 0.5). `success` (the paper's s, docs/algorithm.md): the share of the round's samples that
    succeed, reward >= 0.5. `mean_reward` (labelled option; this project's earlier rule): the mean reward of
    the samples, which under partial credit calls a round of rewards [1, .4, .4, .4] solved. The two agree
    when every reward is 0 or 1 (BFCL)."""

    @field_validator("kinds")
    @classmethod
    def _declared_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        return check_kinds(kinds)

    @model_validator(mode="after")
    def _unused_counts_tools(self) -> SignalsConfig:
        if self.rare_unused and self.rare_pattern != "tool":
            raise ValueError("signals.rare_unused counts offered tools: it needs rare_pattern: tool")
        return self


class ExploreConfig(Section):
    """Signal-guided re-exploration by the teacher (stage `explore`)."""

    guided: bool = True
    """Explore around signal-marked trajectories (CoEvolve). False = the paper's "random exploration"
    ablation: the same number of explorations start from random worlds of the round's dataset under a
    generic request, whatever the signals say."""
    max_explorations: int = Field(4, ge=0, le=10_000)
    """Most signal-marked trajectories re-explored per evolution (one per task; `allotment` says which)."""
    allotment: Literal["priority", "round_robin"] = "priority"
    """How `max_explorations` is shared among the signal kinds. `priority` (this project's rule, which the
    paper configs keep; the paper gives none): kinds in `signals.kinds` order, then newest round, so a later
    kind gets only what the earlier ones leave. `round_robin` (extension, not the paper's): one signal of
    each kind in turn (kinds in `signals.kinds` order, each kind's own ranking), so that no kind starves;
    still one per task, and for `unused` one per tool."""
    named_tool_context: bool = False
    """Extension, not the paper's: when a signal names a tool (an `unused` signal, or a rare one of tool
    patterns), the exploration context holds that tool's full schema (name, description, parameters) and an
    argument-free listing of its app among the offered tools, if one exists
    (`stages.explore.named_tool`)."""
    prefill_named_tool: bool = False
    """Extension, not the paper's: the teacher's first reply of each exploration episode whose signal names
    a tool starts with a call of that tool (assistant prefill, as the reflection's JSON start is): a small
    teacher otherwise calls what the marked trajectory called."""
    prefill_arguments: bool = False
    """Extension, not the paper's: with `prefill_named_tool`, the prefilled call also opens its arguments
    object at the tool's first required parameter (`"arguments": {"<param>": `), so the teacher writes a value
    and not the object's shape: measured on validation (`coevolve bench explore-yield`), a 135M teacher given
    only the tool's name wrote non-object arguments, echoed the schema or left out the required argument."""
    prefill_listing_first: bool = False
    """Extension, not the paper's: with `prefill_named_tool` and a listing in the context
    (`named_tool_context`), the first reply is prefilled as a call of the app's argument-free listing and the
    second as the named tool's call, its first value opened (a string's quote included), so the ids the
    call needs are in the episode before it is made: measured with `prefill_arguments` alone, the calls
    failed on ids the teacher had never seen, written as integers."""
    prefill_listing_call: bool = False
    """Extension, not the paper's: with `prefill_listing_first`, the first reply is the listing's whole call
    (`{"name": <listing>, "arguments": {}}`), not continued by the teacher: measured with
    `prefill_listing_first` alone, a 135M teacher wrote `"arguments": 0` after the prefilled name (a malformed
    call) in every exploration, so the listing's ids never reached the episode."""
    rounds: int = Field(2, ge=1, le=1000)
    """R: independent exploration episodes per exploration context (multi-round)."""
    steps: int = Field(6, ge=1, le=1000)
    """S: most teacher replies per exploration episode (multi-step)."""
    follow_ups: int = Field(1, ge=0, le=100)
    """Extension, not the paper's: user turns added after the explored task's own (0: none, as in the paper),
    each asking the teacher to explore beyond the request (`stages/explore/prompts/explore_follow_up.md`): a small
    teacher otherwise carries the request out and stops, and the only task its calls make is the explored one
    again."""


class AbstractConfig(Section):
    """Abstraction of explored calls into candidate tasks (stage `abstract`)."""

    samples: int = Field(1, ge=1, le=1000)
    """Teacher replies sampled per triple group (each may hold tasks): more candidates for verification to
    choose from at the cost of one batched generation."""
    single_calls: bool = False
    """Extension, not the paper's: also abstract each call of a group with several calls on its own
    (`single_call_groups`): a small teacher matches one call to its query far better than it picks indices
    among several."""
    prefill_effect: bool = False
    """Extension, not the paper's: start a one-call group's reply by what its call did too: a read-only call's
    with its first answer (the task must ask for what the call reads), a state change's with no answers (an
    instruction). Without it a small teacher writes instructions over read-only calls, which verification
    discards as `no effect`."""
    prefill_question: bool = False
    """Extension, not the paper's: start the reply of a group holding a read-only call that takes arguments
    by its solution (that call; in a group of several, after the earlier read-only call whose result shows
    its argument values) and a query opened as a question naming those values ("Look up the contact Quinn
    and tell me the "), before `prefill_effect`'s start (`stages/abstract/questions.py: question_prefix`): measured on
    validation (`coevolve bench explore-yield`), the read-only gap calls a 135M teacher made were worded as
    instructions or as questions naming no id, and discarded as `no effect` or `unsolvable`."""
    max_tasks_per_group: int = Field(3, ge=1, le=1000)
    """Most tasks the teacher may abstract from one triple group (extra ones are rows marked `invalid`)."""
    duplicate_jaccard: float = Field(0.8, ge=0.0, le=1.0)
    """Two candidates with the same normalised solution and query token-Jaccard >= this are duplicates (0: the
    same solution is enough)."""


class VerifyConfig(Section):
    """Environment verification of candidate tasks (stage `verify`)."""

    enabled: bool = True
    """Verify synthesized tasks in the environment before merging. False = the no-verification ablation:
    every parsed candidate is admitted with a lenient checker."""
    judge: Literal["execution", "policy"] = "execution"
    """Who decides a candidate's verdict once it passed the environment checks. `execution` (the paper's
    sentence read literally, docs/algorithm.md): the task is executed, its reference solution played against
    its checker: success -> accept, failure that earns more than an idle answer -> retain; the policy's
    attempts are still made and recorded, and weight the task (`merge.unsolved_weighting`), but decide
    nothing, so a task the policy cannot do yet is admitted. `policy` (labelled: this project's earlier
    rule, an ablation arm): the policy's attempts decide (solved -> accept, progress above an idle answer ->
    retain, else discard), which vetoes every task the policy cannot do yet."""
    attempts: int = Field(1, ge=1, le=1000)
    """K: policy attempts per verified candidate (their best decides under `judge: policy`)."""
    greedy: bool = True
    """Greedy decoding when `attempts` is 1 (otherwise attempts sample at the rollout temperature)."""
    grounding: float = Field(0.5, ge=0.0, le=1.0)
    """Extension, not the paper's (its verification is execution only): least share of the literals a
    synthesized query names (numbers, identifiers with a digit, paths, quoted text) that its solution must
    use or read; 0 turns the check off."""
    contamination_jaccard: float = Field(0.9, ge=0.0, le=1.0)
    """A candidate whose query has token-Jaccard >= this with a held-out eval task is discarded."""


class MergeConfig(Section):
    """Which verified tasks join the dataset, and how often they are drawn (stage `merge`)."""

    admit: tuple[Verdicts, ...] = ADMITTED
    """Verification outcomes merged into D_{r+1}. The paper keeps accepted and retained tasks."""
    signal_weight: float = Field(1.0, gt=0.0, le=1_000_000.0)
    """Sampling weight of merged signal-linked tasks (other tasks weigh 1); > 1 upweights them. Extension, not
    the paper's, when not 1 (the paper merges without weights)."""
    unsolved_weighting: bool = False
    """Extension, not the paper's: scale a merged task's weight by the share of its verification attempts the
    policy failed: one it solved every time weighs 0 and is never drawn (a GRPO group of K successes has zero
    advantage), one it always failed keeps its whole weight. Grades only with `verify.attempts` > 1 (one
    attempt: solved or not); tasks admitted unverified (`verify.enabled: false`) keep their weight."""


MOVED_FIELDS: dict[str, str] = {
    "evolve.window": "signals.window", "evolve.rare_theta": "signals.rare_theta",
    "evolve.rare_pattern": "signals.rare_pattern", "evolve.kinds": "signals.kinds",
    "evolve.guided": "explore.guided", "evolve.max_explorations": "explore.max_explorations",
    "evolve.explore_rounds": "explore.rounds", "evolve.explore_steps": "explore.steps",
    "evolve.explore_follow_ups": "explore.follow_ups",
    "evolve.abstract_samples": "abstract.samples", "evolve.abstract_single_calls": "abstract.single_calls",
    "evolve.abstract_prefill_effect": "abstract.prefill_effect",
    "evolve.max_tasks_per_group": "abstract.max_tasks_per_group",
    "evolve.duplicate_jaccard": "abstract.duplicate_jaccard",
    "evolve.verify": "verify.enabled", "evolve.verify_attempts": "verify.attempts",
    "evolve.verify_greedy": "verify.greedy", "evolve.grounding": "verify.grounding",
    "evolve.contamination_jaccard": "verify.contamination_jaccard",
    "evolve.admit": "merge.admit", "evolve.signal_weight": "merge.signal_weight",
    "evolve.unsolved_weighting": "merge.unsolved_weighting",
    "dataset.bootstrap_budget": "dataset.bootstrap_worlds",
}
"""Config fields that moved when the sections were split by stage: old path -> new path (`load_config`
names the new one)."""
