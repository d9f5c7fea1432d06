"""A trajectory's page: outcome and checks, the conversation, its tool calls with their results, and the
tokens the policy was trained on.

A rollout episode has a `samples` row: every token of the episode (`input_ids`) and `loss_mask` (1 on the
tokens the policy generated, 0 on prompt, user turns and tool results). The page shows them as runs of
policy and masked tokens. The text of each run is decoded with the `tokenizer.json` the run saved with
its checkpoints (the Rust `tokenizers` library: loading it takes milliseconds, no model and no
transformers import); without one the page shows each run's length only. The pane opens on what was
trained: the masked tokens before the first policy token (system prompt, first user turn) are collapsed,
each policy token is its own span titled with its sampled log-prob (`samples.logprobs`), a table lists
them, and the sample's GRPO advantage is recomputed from its group's rewards as `rl.advantages` computes
it under the run's `train.scale_rewards` (it applies to every token of the sample).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from coevolve.ui.lineage import loads_json
from coevolve.ui.reader import RunsReader

MAX_DECODED = 200_000
"""Tokens decoded at most per trajectory (beyond, runs show their lengths)."""
MAX_PER_TOKEN = 4_000
"""Policy tokens shown one by one with their log-probs at most (beyond, as runs)."""
ADVANTAGE_EPS = 1e-6
"""`rl.advantages.group_advantages`' eps, added to the std before dividing."""


def find_trajectory(reader: RunsReader, run: str, trajectory_id: str) -> dict[str, Any] | None:
    if not reader.has("trajectories"):
        return None
    row = reader.one("SELECT * FROM trajectories WHERE run = ? AND trajectory_id = ? LIMIT 1", [run, trajectory_id])
    if row is not None:
        messages = loads_json(row["messages"])
        row["messages"] = messages if isinstance(messages, list) else [{"role": "?", "content": row["messages"]}]
        row["eval_details"] = loads_json(row["eval_details"])
    return row


def trajectory_steps(reader: RunsReader, run: str, round_: int, trajectory_id: str) -> list[dict[str, Any]]:
    """The episode's actions in order (its round's files only)."""
    if not reader.has("steps"):
        return []
    return reader.rows("""SELECT step, turn, call_index, kind, tool, arguments, ok, observation FROM steps
                          WHERE run = ? AND round = ? AND trajectory_id = ? ORDER BY step, call_index LIMIT 2000""",
                       [run, round_, trajectory_id])  # fmt: skip


def token_spans(input_ids: list[int], loss_mask: list[int]) -> list[tuple[int, int, bool]]:
    """Maximal runs of equal mask: (start, end, policy) with `policy` true where the mask is 1."""
    spans, start = [], 0
    for i in range(1, len(input_ids) + 1):
        if i == len(input_ids) or bool(loss_mask[i]) != bool(loss_mask[start]):
            spans.append((start, i, bool(loss_mask[start])))
            start = i
    return spans


@lru_cache(maxsize=8)
def _tokenizer(path: str, mtime_ns: int) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def load_tokenizer(path: Path | None) -> Any | None:
    """The tokenizer in `path`, or None when absent or unreadable (the page then shows lengths)."""
    if path is None:
        return None
    try:
        return _tokenizer(str(path), path.stat().st_mtime_ns)
    except Exception:  # a tokenizer file this version of `tokenizers` cannot read: show lengths instead
        return None


def sample_tokens(reader: RunsReader, run: str, round_: int, trajectory_id: str) -> dict[str, Any] | None:
    """Token counts, policy/masked runs (each policy token with its log-prob, the leading masked run marked
    `collapsed`) and the advantage of the episode's sample; None when it has no sample (an evaluation,
    exploration or verification episode is never trained on)."""
    if not reader.has("samples"):
        return None
    row = reader.one("""SELECT input_ids, loss_mask, logprobs, num_tokens, num_policy_tokens, policy_version, reward,
                               group_id FROM samples WHERE run = ? AND round = ? AND trajectory_id = ? LIMIT 1""",
                     [run, round_, trajectory_id])  # fmt: skip
    if row is None:
        return None
    ids, mask, logprobs = row["input_ids"], row["loss_mask"], row["logprobs"] or []
    path = reader.tokenizer_file(run)
    tokenizer = load_tokenizer(path) if len(ids) <= MAX_DECODED else None
    one_by_one = int(sum(mask)) <= MAX_PER_TOKEN
    spans, policy_tokens = [], []
    for start, end, policy in token_spans(ids, mask):
        span = {"policy": policy, "count": end - start, "collapsed": not policy and not policy_tokens and start == 0,
                "text": tokenizer.decode(ids[start:end], skip_special_tokens=False) if tokenizer else None}  # fmt: skip
        if policy and one_by_one:
            span["tokens"] = [{"position": i, "id": ids[i], "logprob": _at(logprobs, i),
                               "text": tokenizer.decode([ids[i]], skip_special_tokens=False) if tokenizer else None}
                              for i in range(start, end)]  # fmt: skip
            policy_tokens += span["tokens"]
        spans.append(span)
    return {"total": len(ids), "policy": int(sum(mask)), "masked": len(ids) - int(sum(mask)), "spans": spans,
            "tokenizer": str(path.relative_to(reader.root)) if tokenizer and path else None,
            "policy_version": row["policy_version"], "policy_tokens": policy_tokens,
            "advantage": sample_advantage(reader, run, round_, row)}  # fmt: skip


def _at(values: list[float], index: int) -> float | None:
    return float(values[index]) if index < len(values) else None


def sample_advantage(reader: RunsReader, run: str, round_: int, row: dict[str, Any]) -> dict[str, Any]:
    """The sample's advantage as the update computed it (`rl.advantages.group_advantages`): its reward less
    its group's mean, over the group's population std (`group`), the round's (`batch`) or 1 (`none`); 0 for
    a group whose rewards are all equal. With the figures it came from."""
    scale = ((reader.config(run).get("train") or {}).get("scale_rewards")) or "group"
    rewards = [r["reward"] for r in reader.rows(
        "SELECT reward FROM samples WHERE run = ? AND round = ? AND group_id = ?", [run, round_, row["group_id"]])]
    mean = sum(rewards) / len(rewards)
    spread = rewards if scale == "group" else [r["reward"] for r in reader.rows(
        "SELECT reward FROM samples WHERE run = ? AND round = ?", [run, round_])] if scale == "batch" else []
    std = _population_std(spread) if spread else None
    flat = max(rewards) == min(rewards)
    centred = row["reward"] - mean
    value = 0.0 if flat else centred / (std + ADVANTAGE_EPS) if std is not None else centred
    return {"value": value, "reward": row["reward"], "group_mean": mean, "group_size": len(rewards),
            "std": std, "scale": scale}  # fmt: skip


def _population_std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def trajectory_page(reader: RunsReader, run: str, trajectory_id: str) -> dict[str, Any] | None:
    """Everything the trajectory page shows, or None when the run has no such trajectory."""
    row = find_trajectory(reader, run, trajectory_id)
    if row is None:
        return None
    round_ = int(row["round"])
    return {
        "t": row,
        "steps": trajectory_steps(reader, run, round_, trajectory_id),
        "tokens": sample_tokens(reader, run, round_, trajectory_id),
        "details": json.dumps(row["eval_details"], ensure_ascii=False) if row["eval_details"] else None,
        "task_known": reader.has("tasks") and reader.one(
            "SELECT 1 AS found FROM tasks WHERE run = ? AND task_id = ? LIMIT 1", [run, row["task_id"]]) is not None,
    }
