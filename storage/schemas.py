"""Explicit Arrow schemas, one per artifact, each with a version.

An artifact name is a plural noun and equals its DuckDB view name. Every row carries `run` and `round`
(the hive path adds `stage`). Nested, environment-specific payloads (messages, arguments, initial states,
checker specs) are JSON strings so that the column set never depends on the data.

Bump an artifact's version when its columns change; readers refuse a file whose version differs. A phase that
owns its vocabulary declares its artifacts' schemas in its contract (`coevolve.contracts`: `signals`,
`candidates`, `verifications`); the others are here.
"""

from __future__ import annotations

import pyarrow as pa

from coevolve.contracts.abstract import candidates_schema
from coevolve.contracts.arrow import artifact_schema as _schema
from coevolve.contracts.signals import signals_schema
from coevolve.contracts.verify import verifications_schema

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

EVALUATIONS = _schema(
    1,
    pa.field("env", pa.string(), nullable=False),  # the environment the tasks are of
    pa.field("env_options", pa.string(), nullable=False),  # JSON, the options it was made with
    pa.field("env_seed", pa.int64()),  # its `seed` option; null when not given
    pa.field("split", pa.string(), nullable=False),
    pa.field("tasks_key", pa.string(), nullable=False),  # equal keys: the same tasks, scored the same way
    pa.field("tasks", pa.int32(), nullable=False),
    pa.field("episodes", pa.int32(), nullable=False),
    pa.field("policy_version", pa.string(), nullable=False),  # round -1: the initial policy, the baseline
    pa.field("greedy", pa.bool_(), nullable=False),
    pa.field("samples", pa.int32(), nullable=False),  # episodes per task
    pa.field("success", pa.float64(), nullable=False),  # mean over episodes
    pa.field("reward", pa.float64(), nullable=False),
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

# --- data evolution (stages/signals, explore, triples, abstract, verify, merge) -----------------------------

SIGNALS = signals_schema()

EXPLORATIONS = _schema(
    2,
    pa.field("exploration_id", pa.string(), nullable=False),
    pa.field("signal_id", pa.string()),  # null for bootstrap (unguided) explorations
    pa.field("kind", pa.string(), nullable=False),  # the signal kind, or `bootstrap`
    pa.field("task_id", pa.string(), nullable=False),  # the task whose initial state is explored
    pa.field("trajectory_id", pa.string()),  # the signal-marked trajectory reflected on
    pa.field("teacher", pa.string(), nullable=False),  # teacher version
    pa.field("reflection", pa.string()),  # the teacher's raw reply (null when nothing was asked)
    pa.field("context", pa.string()),  # parsed exploration context, JSON; null when unparsable
    pa.field("status", pa.string(), nullable=False),  # ok | unparsable | invalid | error
    pa.field("reason", pa.string()),
    pa.field("trajectory_ids", pa.string(), nullable=False),  # JSON list: its exploration episodes
    pa.field("task", pa.string(), nullable=False),  # JSON `tasks` row of the explored task, as its episodes ran it
)

TRIPLES = _schema(
    1,
    pa.field("triple_id", pa.string(), nullable=False),
    pa.field("group_id", pa.string(), nullable=False),  # one group per exploration context
    pa.field("exploration_id", pa.string(), nullable=False),
    pa.field("trajectory_id", pa.string(), nullable=False),
    pa.field("task_id", pa.string(), nullable=False),
    pa.field("seq", pa.int32(), nullable=False),  # order of the call in its trajectory
    pa.field("step", pa.int32(), nullable=False),
    pa.field("call_index", pa.int32(), nullable=False),
    pa.field("turn", pa.int32(), nullable=False),
    pa.field("tool", pa.string(), nullable=False),  # the action
    pa.field("arguments", pa.string(), nullable=False),  # JSON
    pa.field("observation", pa.string(), nullable=False),
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("state_before", pa.string()),  # environment state digest; null when the replay diverged
    pa.field("state_after", pa.string()),
    pa.field("changed", pa.bool_()),
)

CANDIDATES = candidates_schema()

VERIFICATIONS = verifications_schema()

ARTIFACTS: dict[str, pa.Schema] = {
    "trajectories": TRAJECTORIES,
    "steps": STEPS,
    "samples": SAMPLES,
    "updates": UPDATES,
    "evals": EVALS,
    "evaluations": EVALUATIONS,
    "tasks": TASKS,
    "datasets": DATASETS,
    "signals": SIGNALS,
    "explorations": EXPLORATIONS,
    "triples": TRIPLES,
    "candidates": CANDIDATES,
    "verifications": VERIFICATIONS,
}

TIMINGS: dict[str, tuple[str, ...]] = {"updates": ("seconds",)}
"""Columns that measure how long something took, not what was computed: they differ between two runs that
computed the same thing (`flows.compare` leaves them out)."""


def schema_for(artifact: str) -> pa.Schema:
    try:
        return ARTIFACTS[artifact]
    except KeyError:
        raise KeyError(f"unknown artifact {artifact!r}; known: {', '.join(sorted(ARTIFACTS))}") from None


def schema_version(schema: pa.Schema) -> int:
    return int((schema.metadata or {}).get(b"schema_version", b"0"))
