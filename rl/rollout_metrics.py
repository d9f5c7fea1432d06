"""TRL's figures of a generation batch, for a round's rollouts: what a TRL user reads beside the loss.

From the rollout's `trajectories` and `steps` rows (`agents.ledger`), one value each, under TRL's names with
``/`` written ``_`` (tracking logs them as `train/<TRL's name>`, `flows.tracking`):

    frac_reward_zero_std       share of groups (tasks) whose rollouts' rewards are all equal: no advantage, no
                               learning signal (the complement of `frac_groups_with_signal`, over every group)
    completions_mean_length    policy tokens per episode, over every episode (TRL: completion tokens per
                               completion; here the tool outputs and templates between replies are not counted)
    completions_clipped_ratio  share of episodes that a limit ended (`rollout.max_replies` or
                               `rollout.max_context_tokens`: finish `max_steps` or `context`), not the episode's
                               own end (TRL: completions cut at max_completion_length, without an EOS)
    tools_call_frequency       tool calls per episode (TRL: per completion)
    tools_failure_frequency    failed tool calls per tool call, 0 without calls (TRL's); an unparsable call is no
                               call here, as in TRL

Pure: rows in, numbers out. Written into the rollout manifest's outputs (`stages/rollout/stage.py`), read from
there by the web view (`ui.queries.trl_figures`), which shows them under TRL's own names (`TRL_NAMES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ROLLOUT_FIGURES = ("frac_reward_zero_std", "completions_mean_length", "completions_clipped_ratio",
                   "tools_call_frequency", "tools_failure_frequency")  # fmt: skip
"""The names `rollout_figures` returns."""
TRL_NAMES = {"frac_reward_zero_std": "frac_reward_zero_std", "completions_mean_length": "completions/mean_length",
             "completions_clipped_ratio": "completions/clipped_ratio", "tools_call_frequency": "tools/call_frequency",
             "tools_failure_frequency": "tools/failure_frequency"}  # fmt: skip
"""Each figure's name as TRL logs it (what the web view shows)."""
CLIPPED_FINISHES = frozenset({"max_steps", "context"})
"""An episode's `finish` when a rollout limit ended it."""


def rollout_figures(trajectories: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The round's figures (see the module docstring); every one 0 for a round without episodes."""
    n = len(trajectories)
    rewards: dict[str, set[float]] = {}
    for t in trajectories:
        rewards.setdefault(t["group_id"], set()).add(float(t["reward"]))
    calls = [s for s in steps if s["kind"] == "call"]
    failed = sum(not s["ok"] for s in calls)
    return {
        "frac_reward_zero_std": sum(len(r) == 1 for r in rewards.values()) / len(rewards) if rewards else 0.0,
        "completions_mean_length": sum(t["completion_tokens"] for t in trajectories) / n if n else 0.0,
        "completions_clipped_ratio": sum(t["finish"] in CLIPPED_FINISHES for t in trajectories) / n if n else 0.0,
        "tools_call_frequency": len(calls) / n if n else 0.0,
        "tools_failure_frequency": failed / len(calls) if calls else 0.0,
    }
