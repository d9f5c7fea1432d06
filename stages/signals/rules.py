"""Weakness signals: mark the trajectories of round r that the re-exploration stage should look at.

Step 2 of the CoEvolve loop (docs/algorithm.md, "The signals, precisely"). The paper's three rules over
the ledger, each switchable on its own for the paper's ablations, and one extension:

- *forgetting*: the task's score s in a round is the success rate of its samples there (a sample succeeds
  when its reward is >= 0.5; `forgetting_score="mean_reward"`, a labelled option: the mean reward). It
  fires at round r when some score among the task's last W attempted rounds before r is >= 0.5 and the
  score at r is < 0.5; it marks the task's failed (reward < 0.5) trajectories of round r.
- *boundary*: the task's round-r samples hold both a success (reward > 0.5) and a failure
  (reward < 0.5); a reward of exactly 0.5 is neither. Marks all of the task's round-r trajectories.
- *rare*: over the actions of rounds r-W+1..r, a pattern p (a tool name, or with
  `rare_pattern="bigram"` a pair "a>b" of consecutive calls in one trajectory) with
  0 < c_p / N < theta / 100, N the number of actions (bigrams) in that window. Marks the round-r
  trajectories that use p. With `rare_pattern="task"` (the seed summary's reading) p is a task and c_p
  its rollouts among the N rollouts of the window: a task drawn rarely in the current training
  distribution; marks its round-r trajectories.
- *unused* (extension, not the paper's): a tool that the round-r trajectories' tasks offer and that no
  call of rounds r-W+1..r names. One signal per tool, on one round-r trajectory that was offered it (the
  first by task, sample, trajectory id).

Output: one row per (kind, marked trajectory), with a JSON `evidence` payload and a deterministic
`signal_id`. Rows of rounds > r are ignored, so re-running on a longer ledger gives the same signals.
The trajectories passed in should be one source (the GRPO rollouts); mixing eval rollouts into the same
(task, round) would change the scores.

    from coevolve.stages.signals.rules import extract_signals
    signals = extract_signals(trajectories, steps, round=12)

Each kind is a `Rule` over one `Ledger` in `RULES`, under its `SignalKind` (`coevolve.contracts.signals`, where
every view finds it); `add_rule(kind, rule)` adds a kind with one call.

Everything is vectorised Polars; DuckDB computes the sha256 behind `signal_id`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import duckdb
import polars as pl

from coevolve.contracts import signals as contract
from coevolve.contracts.signals import BOUNDARY, FORGETTING, RARE, UNUSED, SignalKind

RARE_PATTERNS = ("tool", "bigram", "task")
FORGETTING_SCORES = ("success", "mean_reward")
SUCCESS = 0.5
"""Reward threshold of the paper: success means s >= 0.5 (forgetting); boundary uses strict > and <."""

SIGNALS_SCHEMA = pl.Schema({
    "signal_id": pl.String,  # sha256(JSON {kind, round, task_id, trajectory_id}, + tool for unused)[:16]
    "kind": pl.String,  # a `SignalKind` name
    "task_id": pl.String,
    "trajectory_id": pl.String,
    "round": pl.Int32,
    "evidence": pl.String,  # JSON, see the rule functions below
})

_TRAJECTORY_COLUMNS = ("task_id", "round", "sample", "reward", "trajectory_id")
_STEP_COLUMNS = {"tool": ("trajectory_id", "tool"), "bigram": ("trajectory_id", "tool", "step", "call_index"),
                 "task": ()}


# --- the rules, as expressions ------------------------------------------------------------------

def is_forgotten(best_score: pl.Expr, score: pl.Expr) -> pl.Expr:
    """Some earlier score in the window reached success and the current one does not."""
    return (best_score >= SUCCESS) & (score < SUCCESS)


def is_boundary(successes: pl.Expr, failures: pl.Expr) -> pl.Expr:
    """Both outcomes among the K samples of one step (strict on both sides of 0.5)."""
    return (successes > 0) & (failures > 0)


def is_rare(count: pl.Expr, total: pl.Expr, theta: float) -> pl.Expr:
    """0 < c / N < theta / 100, compared as 100 c < theta N so that no division rounds."""
    return (count > 0) & (count.cast(pl.Float64) * 100.0 < total.cast(pl.Float64) * theta)


# --- the kinds ----------------------------------------------------------------------------------

def marked_signals(frame: pl.LazyFrame, kind: str, round_: int, evidence: pl.Expr,
                   tool: pl.Expr | None = None) -> pl.LazyFrame:
    """`frame`'s trajectories as signals of `kind` (what a rule returns); `evidence` a struct, stored as JSON."""
    return frame.select(
        kind=pl.lit(kind), task_id="task_id", trajectory_id="trajectory_id",
        round=pl.lit(round_, dtype=pl.Int32), evidence=evidence.struct.json_encode(),
        tool=pl.lit(None, dtype=pl.String) if tool is None else tool,
    )


def round_score(score: str) -> pl.Expr:
    """A task's score s in one round: the share of its samples that succeed (reward >= 0.5), or with
    `mean_reward` the mean of their rewards. The two agree when every reward is 0 or 1."""
    if score == "mean_reward":
        return pl.col("reward").mean()
    return (pl.col("reward") >= SUCCESS).cast(pl.Float64).mean()


def forgetting_signals(trajectories: pl.LazyFrame, *, round_: int, window: int,
                       score: str = "success") -> pl.LazyFrame:
    """Failed round-r trajectories of tasks whose best score over their last `window` attempts was >= 0.5
    and whose round-r score is < 0.5 (`round_score`).

    Evidence: {score, best_score, best_round (the most recent round reaching best_score), attempts,
    scored_on (success | mean_reward)}.
    """
    scores = trajectories.group_by("task_id", "round").agg(score=round_score(score))
    now = scores.filter(pl.col("round") == round_, pl.col("score") < SUCCESS).select("task_id", "score")
    history = (
        scores.filter(pl.col("round") < round_)
        .join(now.select("task_id"), on="task_id", how="semi")
        # the W most recent *attempted* rounds: rounds are unique per task after the group_by
        .filter(pl.col("round").rank("ordinal", descending=True).over("task_id") <= window)
    )
    best = history.group_by("task_id").agg(
        best_score=pl.col("score").max(),
        best_round=pl.col("round").filter(pl.col("score") == pl.col("score").max()).max(),
        attempts=pl.len(),
    )
    fired = now.join(best, on="task_id").filter(is_forgotten(pl.col("best_score"), pl.col("score")))
    failed = trajectories.filter(pl.col("round") == round_, pl.col("reward") < SUCCESS)
    evidence = pl.struct("score", "best_score", "best_round", "attempts", scored_on=pl.lit(score))
    return marked_signals(failed.join(fired, on="task_id"), "forgetting", round_, evidence)


def boundary_signals(trajectories: pl.LazyFrame, *, round_: int) -> pl.LazyFrame:
    """All round-r trajectories of tasks whose round-r rewards hold both > 0.5 and < 0.5.

    Evidence: {successes, failures, samples, mean}.
    """
    current = trajectories.filter(pl.col("round") == round_)
    groups = current.group_by("task_id").agg(
        successes=(pl.col("reward") > SUCCESS).sum(), failures=(pl.col("reward") < SUCCESS).sum(),
        samples=pl.len(), mean=pl.col("reward").mean(),
    ).filter(is_boundary(pl.col("successes"), pl.col("failures")))
    evidence = pl.struct("successes", "failures", "samples", "mean")
    return marked_signals(current.join(groups, on="task_id"), "boundary", round_, evidence)


def action_patterns(calls: pl.LazyFrame, pattern: str) -> pl.LazyFrame:
    """One row per action (`tool`) or per pair of consecutive calls in a trajectory (`bigram`, "a>b").

    `calls` holds call steps only (tool not null), so a bigram skips over parse errors and answers.
    """
    if pattern == "tool":
        return calls.select("trajectory_id", "round", pattern=pl.col("tool"))
    ordered = calls.sort("trajectory_id", "step", "call_index")
    same = pl.col("trajectory_id").shift(1) == pl.col("trajectory_id")
    bigram = pl.concat_str(pl.col("tool").shift(1), pl.lit(">"), pl.col("tool"))
    return ordered.select("trajectory_id", "round", pattern=pl.when(same).then(bigram)).drop_nulls("pattern")


def rare_signals(
    trajectories: pl.LazyFrame, steps: pl.LazyFrame, *, round_: int, window: int, theta: float, pattern: str,
    offered: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """Round-r trajectories using a pattern with 0 < c_p / N < theta / 100 over rounds r-W+1..r.

    `pattern` `task`: the patterns are the trajectories' tasks (each rollout one action, `steps` unused).
    `offered` (task_id, tool), the tools each task offers: also mark the round-r trajectories of tasks
    offering a tool that no action of the window called (count 0; `signals.rare_unused`, not the paper's).
    Evidence: {pattern_kind, total (N), first_round, patterns: [{pattern, count, frequency}] sorted by
    count then pattern} - one row per trajectory however many rare patterns it uses.
    `steps` carry no round (the join with `trajectories` places them), so they must hold the calls of
    rounds r-W+1..r: a window loaded short is silently a smaller N, not an error.
    """
    first = round_ - window + 1
    in_window = trajectories.filter(pl.col("round") >= first)
    if pattern == "task":
        actions = in_window.select("trajectory_id", "round", pattern=pl.col("task_id"))
    else:
        calls = steps.filter(pl.col("tool").is_not_null()).join(in_window.select("trajectory_id", "round"),
                                                                 on="trajectory_id")
        actions = action_patterns(calls, pattern)
    counts = (actions.group_by("pattern").agg(count=pl.len().cast(pl.Int64))
              .with_columns(total=pl.col("count").sum()))  # fmt: skip
    rare = counts.filter(is_rare(pl.col("count"), pl.col("total"), theta)).with_columns(
        frequency=pl.col("count") / pl.col("total"))
    used = actions.filter(pl.col("round") == round_).select("trajectory_id", "pattern").unique()
    if offered is not None:
        unused, offers = unused_offered(trajectories.filter(pl.col("round") == round_), counts, offered)
        rare, used = pl.concat([rare, unused]), pl.concat([used, offers])
    per_trajectory = used.join(rare, on="pattern").group_by("trajectory_id").agg(
        total=pl.col("total").first(),
        patterns=pl.struct("pattern", "count", "frequency").sort_by("count", "pattern"),
    )
    marked = trajectories.filter(pl.col("round") == round_).join(per_trajectory, on="trajectory_id")
    evidence = pl.struct(
        pattern_kind=pl.lit(pattern), total="total", first_round=pl.lit(first), patterns="patterns")
    return marked_signals(marked, "rare", round_, evidence)


def unused_offered(
    current: pl.LazyFrame, counts: pl.LazyFrame, offered: pl.LazyFrame
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(the tools `current`'s tasks offer that no counted action called, as rare patterns of count 0;
    the (trajectory_id, pattern) rows of the trajectories offered them)."""
    offers = (current.select("trajectory_id", "task_id").join(offered, on="task_id")
              .select("trajectory_id", pattern=pl.col("tool")).unique())  # fmt: skip
    total = counts.select(total=pl.col("count").sum().fill_null(0).cast(pl.Int64))
    unused = (offers.select("pattern").unique().join(counts.select("pattern"), on="pattern", how="anti")
              .join(total, how="cross")
              .select("pattern", count=pl.lit(0, pl.Int64), total="total", frequency=pl.lit(0.0)))  # fmt: skip
    return unused, offers.join(unused.select("pattern"), on="pattern")


def spread_key(tool_and_task: str) -> str:
    """sha256 of "<tool>\\0<task_id>": orders the tasks offering a tool differently for each tool."""
    return hashlib.sha256(tool_and_task.encode()).hexdigest()


def unused_signals(
    trajectories: pl.LazyFrame, steps: pl.LazyFrame, *, round_: int, window: int, offered: pl.LazyFrame
) -> pl.LazyFrame:
    """One row per tool that a round-r trajectory's task offers and no call of rounds r-W+1..r names
    (extension, not the paper's), on one round-r trajectory offered it: the first sample of the task whose
    `spread_key(tool, task)` is least. Exploration takes one signal per task, so pointing every tool at the
    same first task would leave all but one unexplored; task ids are content hashes, so the choice is the
    same in every run of the ledger. `steps` must hold the calls of the window, as for `rare_signals`.

    Evidence: {tool, offered_trajectories (round-r trajectories offered it), offered_tasks,
    window_calls (0), first_round}.
    """
    first = round_ - window + 1
    in_window = trajectories.filter(pl.col("round") >= first).select("trajectory_id")
    called = steps.filter(pl.col("tool").is_not_null()).join(in_window, on="trajectory_id").select("tool").unique()
    current = trajectories.filter(pl.col("round") == round_).select("task_id", "trajectory_id", "sample")
    offers = current.join(offered.select("task_id", "tool").unique(), on="task_id")
    spread = pl.concat_str("tool", "task_id", separator="\x00").map_elements(spread_key, return_dtype=pl.String)
    unused = (offers.join(called, on="tool", how="anti").with_columns(spread=spread)
              .sort("tool", "spread", "sample", "trajectory_id"))  # fmt: skip
    per_tool = unused.group_by("tool", maintain_order=True).agg(
        task_id=pl.col("task_id").first(), trajectory_id=pl.col("trajectory_id").first(),
        offered_trajectories=pl.len(), offered_tasks=pl.col("task_id").n_unique(),
    )
    evidence = pl.struct("tool", "offered_trajectories", "offered_tasks",
                         window_calls=pl.lit(0), first_round=pl.lit(first))
    return marked_signals(per_tool, "unused", round_, evidence, tool=pl.col("tool"))


# --- the stage ----------------------------------------------------------------------------------

def _check_arguments(kinds: Iterable[str], window: int, rare_theta: float, rare_pattern: str,
                     forgetting_score: str) -> tuple[str, ...]:
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    try:
        contract.check_kinds(kinds)
    except ValueError as exc:
        raise ValueError(f"kinds: {exc}") from None
    missing = [kind for kind in kinds if kind not in RULES]
    if missing:
        raise ValueError(f"kinds: no rule computes signal kind(s) {missing} (stages.signals.rules.add_rule)")
    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    if not 0 <= rare_theta <= 100:
        raise ValueError(f"rare_theta: a percentage in [0, 100], got {rare_theta}")
    if rare_pattern not in RARE_PATTERNS:
        raise ValueError(f"rare_pattern: expected one of {list(RARE_PATTERNS)}, got {rare_pattern!r}")
    if forgetting_score not in FORGETTING_SCORES:
        raise ValueError(f"forgetting_score: expected one of {list(FORGETTING_SCORES)}, got {forgetting_score!r}")
    return kinds


def _require(frame: pl.DataFrame, name: str, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}")


def with_signal_ids(marked: pl.DataFrame) -> pl.DataFrame:
    """Add `signal_id` = sha256 of the JSON object {kind, round, task_id, trajectory_id} (an `unused` row's
    with its `tool` too, as one trajectory may carry several), first 16 hex.

    For ASCII ids this equals `envs.base.content_hash({...})` (sorted keys, compact separators).
    """
    plain = pl.struct("kind", "round", "task_id", "trajectory_id").struct.json_encode()
    with_tool = pl.struct("kind", "round", "task_id", "tool", "trajectory_id").struct.json_encode()
    keyed = marked.with_columns(key=pl.when(pl.col("kind") == "unused").then(with_tool).otherwise(plain))
    with duckdb.connect() as con:
        con.register("marked", keyed.to_arrow())
        out = con.sql("SELECT left(sha256(key), 16) AS signal_id, * EXCLUDE (key) FROM marked").pl()
    return out.select(SIGNALS_SCHEMA.names()).cast(dict(SIGNALS_SCHEMA))


def extract_signals(
    trajectories: pl.DataFrame,
    steps: pl.DataFrame,
    *,
    round: int,  # shadows the builtin: the name the stage contract uses
    window: int = 10,
    rare_theta: float = 5.0,
    kinds: Iterable[str] = (FORGETTING.name, BOUNDARY.name, RARE.name),
    rare_pattern: str = "tool",
    offered: pl.DataFrame | None = None,
    rare_unused: bool = False,
    forgetting_score: str = "success",
) -> pl.DataFrame:
    """Signals of round `round` from the ledger up to that round, with schema `SIGNALS_SCHEMA`.

    `window` is W for forgetting (attempted rounds), rare and unused (calendar rounds); `rare_theta` is a
    percentage; `offered` (task_id, tool): the tools each task offers, which the `unused` kind needs, and
    with `rare_unused` tools offered but never called are rare too (`rare_signals`; tool patterns only).
    Rows are sorted by kind, task_id, trajectory_id (then tool).
    """
    kinds = _check_arguments(kinds, window, rare_theta, rare_pattern, forgetting_score)
    if "unused" in kinds and offered is None:
        raise ValueError("kinds: unused needs the tools each task offers (offered)")
    if rare_unused and (offered is None or rare_pattern != "tool"):
        raise ValueError("rare_unused counts offered tools: it needs offered and rare_pattern tool, "
                         f"not rare_pattern {rare_pattern}")
    if trajectories.height == 0 or not kinds:
        return SIGNALS_SCHEMA.to_frame()
    _require(trajectories, "trajectories", _TRAJECTORY_COLUMNS)
    traj = (
        trajectories.lazy().select(_TRAJECTORY_COLUMNS)
        .with_columns(pl.col("round").cast(pl.Int32), pl.col("reward").cast(pl.Float64))
        .filter(pl.col("round") <= round)
    )
    ledger = Ledger(traj, steps, round, window, rare_theta, rare_pattern, offered, rare_unused, forgetting_score)
    parts = [part for kind, rule in RULES.items() if kind in kinds and (part := rule(ledger)) is not None]
    frames = [frame for frame in pl.collect_all(parts) if frame.height > 0]
    if not frames:
        return SIGNALS_SCHEMA.to_frame()
    return with_signal_ids(pl.concat(frames).sort("kind", "task_id", "trajectory_id", "tool", nulls_last=True))


# --- the kinds' rules ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Ledger:
    """What a rule reads: the rollouts up to the round (lazy: task_id, round, sample, reward,
    trajectory_id), the steps of the window, and the signals settings."""

    trajectories: pl.LazyFrame
    steps: pl.DataFrame
    round: int
    window: int
    rare_theta: float
    rare_pattern: str
    offered: pl.DataFrame | None
    rare_unused: bool
    forgetting_score: str


Rule = Callable[[Ledger], "pl.LazyFrame | None"]
"""A kind's rule: the marked trajectories of `ledger.round` (`marked_signals` columns), or None when it has nothing
to count."""


def _forgetting(ledger: Ledger) -> pl.LazyFrame:
    return forgetting_signals(ledger.trajectories, round_=ledger.round, window=ledger.window,
                              score=ledger.forgetting_score)


def _boundary(ledger: Ledger) -> pl.LazyFrame:
    return boundary_signals(ledger.trajectories, round_=ledger.round)


def _rare(ledger: Ledger) -> pl.LazyFrame | None:
    pattern = ledger.rare_pattern
    if ledger.steps.height == 0 and not ledger.rare_unused and pattern != "task":
        return None
    _require(ledger.steps, "steps", _STEP_COLUMNS[pattern])
    return rare_signals(ledger.trajectories, ledger.steps.lazy().select(_STEP_COLUMNS[pattern]), round_=ledger.round,
                        window=ledger.window, theta=ledger.rare_theta, pattern=pattern,
                        offered=ledger.offered.lazy() if ledger.rare_unused else None)


def _unused(ledger: Ledger) -> pl.LazyFrame:
    _require(ledger.steps, "steps", _STEP_COLUMNS["tool"])
    _require(ledger.offered, "offered", ("task_id", "tool"))
    return unused_signals(ledger.trajectories, ledger.steps.lazy().select(_STEP_COLUMNS["tool"]),
                          round_=ledger.round, window=ledger.window, offered=ledger.offered.lazy())


RULES: dict[str, Rule] = {FORGETTING.name: _forgetting, BOUNDARY.name: _boundary, RARE.name: _rare,
                          UNUSED.name: _unused}
"""Signal kind -> its rule."""


def add_rule(kind: SignalKind, rule: Rule) -> SignalKind:
    """Add a signal kind: its contract (`coevolve.contracts.signals`) and the rule that computes it. One call,
    and `signals.kinds` may name it."""
    contract.add_signal_kind(kind)
    RULES[kind.name] = rule
    return kind


def remove_rule(name: str) -> None:
    """Forget a kind `add_rule` added."""
    contract.remove_signal_kind(name)
    RULES.pop(name, None)
