"""Explicit Arrow schemas, one per artifact, each with a version.

An artifact name is a plural noun and equals its DuckDB view name. Every row carries `run` and `round`
(the hive path adds `stage`). Nested, environment-specific payloads (messages, arguments, initial states,
checker specs) are JSON strings so that the column set never depends on the data.

Bump an artifact's version when its columns change; readers refuse a file whose version differs.
"""

from __future__ import annotations

import pyarrow as pa

_KEY = [pa.field("run", pa.string(), nullable=False), pa.field("round", pa.int32(), nullable=False)]


def _schema(version: int, *fields: pa.Field) -> pa.Schema:
    return pa.schema([*_KEY, *fields], metadata={b"schema_version": str(version).encode()})


TRAJECTORIES = _schema(
    1,
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),  # rollout | eval | explore | verify
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("group_id", pa.string(), nullable=False),  # the K samples of one task in one round
    pa.field("sample", pa.int32(), nullable=False),
    pa.field("policy_version", pa.string(), nullable=False),
    pa.field("reward", pa.float64(), nullable=False),
    pa.field("success", pa.bool_(), nullable=False),
    pa.field("finish", pa.string(), nullable=False),  # done | max_steps | max_tokens | context | error
    pa.field("error", pa.string()),
    pa.field("num_turns", pa.int32(), nullable=False),
    pa.field("num_steps", pa.int32(), nullable=False),
    pa.field("num_tool_calls", pa.int32(), nullable=False),
    pa.field("num_tool_errors", pa.int32(), nullable=False),
    pa.field("prompt_tokens", pa.int32(), nullable=False),
    pa.field("completion_tokens", pa.int32(), nullable=False),
    pa.field("messages", pa.string(), nullable=False),  # JSON list of {role, content}
    pa.field("eval_details", pa.string(), nullable=False),  # JSON
)

STEPS = _schema(
    1,
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("step", pa.int32(), nullable=False),  # index of the model reply in the episode
    pa.field("turn", pa.int32(), nullable=False),
    pa.field("call_index", pa.int32(), nullable=False),  # index of the action within the reply
    pa.field("kind", pa.string(), nullable=False),  # call | parse_error | answer
    pa.field("tool", pa.string()),
    pa.field("arguments", pa.string()),  # JSON
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("observation", pa.string(), nullable=False),
    pa.field("reply", pa.string(), nullable=False),
)

SAMPLES = _schema(
    1,
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("group_id", pa.string(), nullable=False),
    pa.field("policy_version", pa.string(), nullable=False),
    pa.field("reward", pa.float64(), nullable=False),
    pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),  # 1 on policy tokens
    pa.field("logprobs", pa.list_(pa.float32()), nullable=False),  # sampler's, 0 where mask is 0
    pa.field("num_tokens", pa.int32(), nullable=False),
    pa.field("num_policy_tokens", pa.int32(), nullable=False),
)

UPDATES = _schema(
    1,
    pa.field("step", pa.int32(), nullable=False),
    pa.field("base_version", pa.string(), nullable=False),
    pa.field("policy_version", pa.string(), nullable=False),
    pa.field("loss", pa.float64(), nullable=False),
    pa.field("pg_loss", pa.float64(), nullable=False),
    pa.field("kl", pa.float64(), nullable=False),
    pa.field("clip_fraction", pa.float64(), nullable=False),
    pa.field("grad_norm", pa.float64(), nullable=False),
    pa.field("lr", pa.float64(), nullable=False),
    pa.field("tokens", pa.int64(), nullable=False),
    pa.field("samples", pa.int32(), nullable=False),
    pa.field("groups_with_signal", pa.int32(), nullable=False),
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("checkpoint", pa.string(), nullable=False),
)

EVALS = _schema(
    1,
    pa.field("split", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("family", pa.string(), nullable=False),
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("policy_version", pa.string(), nullable=False),
    pa.field("greedy", pa.bool_(), nullable=False),
    pa.field("reward", pa.float64(), nullable=False),
    pa.field("success", pa.bool_(), nullable=False),
)

TASKS = _schema(
    1,
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("env", pa.string(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("family", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("turns", pa.string(), nullable=False),  # JSON list of user messages
    pa.field("initial_state", pa.string(), nullable=False),  # JSON
    pa.field("solution", pa.string()),  # JSON list (per turn) of lists of {name, arguments}
    pa.field("checker", pa.string(), nullable=False),  # JSON
    pa.field("lineage", pa.string(), nullable=False),  # JSON {signal_id, verification_id, ...}
)

DATASETS = _schema(
    1,
    pa.field("dataset_version", pa.int32(), nullable=False),  # D_v is used from round v on
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("weight", pa.float64(), nullable=False),
    pa.field("added_round", pa.int32(), nullable=False),
)

ARTIFACTS: dict[str, pa.Schema] = {
    "trajectories": TRAJECTORIES,
    "steps": STEPS,
    "samples": SAMPLES,
    "updates": UPDATES,
    "evals": EVALS,
    "tasks": TASKS,
    "datasets": DATASETS,
}


def schema_for(artifact: str) -> pa.Schema:
    try:
        return ARTIFACTS[artifact]
    except KeyError:
        raise KeyError(f"unknown artifact {artifact!r}; known: {', '.join(sorted(ARTIFACTS))}") from None


def schema_version(schema: pa.Schema) -> int:
    return int((schema.metadata or {}).get(b"schema_version", b"0"))
