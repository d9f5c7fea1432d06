"""A trajectory's page: outcome and checks, the conversation, its tool calls with their results, and the
tokens the policy was trained on.

A rollout episode has a `samples` row: every token of the episode (`input_ids`) and `loss_mask` (1 on the
tokens the policy generated, 0 on prompt, user turns and tool results). The page shows them as runs of
policy and masked tokens. The text of each run is decoded with the `tokenizer.json` the run saved with
its checkpoints (the Rust `tokenizers` library: loading it takes milliseconds, no model and no
transformers import); without one the page shows each run's length only.
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
    """Token counts and policy/masked runs of the episode's sample; None when it has no sample (an
    evaluation, exploration or verification episode is never trained on)."""
    if not reader.has("samples"):
        return None
    row = reader.one("""SELECT input_ids, loss_mask, num_tokens, num_policy_tokens, policy_version FROM samples
                        WHERE run = ? AND round = ? AND trajectory_id = ? LIMIT 1""", [run, round_, trajectory_id])  # fmt: skip
    if row is None:
        return None
    ids, mask = row["input_ids"], row["loss_mask"]
    path = reader.tokenizer_file(run)
    tokenizer = load_tokenizer(path) if len(ids) <= MAX_DECODED else None
    spans = [{"policy": policy, "count": end - start,
              "text": tokenizer.decode(ids[start:end], skip_special_tokens=False) if tokenizer else None}
             for start, end, policy in token_spans(ids, mask)]  # fmt: skip
    return {"total": len(ids), "policy": int(sum(mask)), "masked": len(ids) - int(sum(mask)), "spans": spans,
            "tokenizer": str(path.relative_to(reader.root)) if tokenizer and path else None,
            "policy_version": row["policy_version"]}  # fmt: skip


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
