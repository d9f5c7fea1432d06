"""Signal-guided re-exploration (step 3 of the loop): reflection, exploration contexts, episodes.

For each target (a task's initial state, with the signal-marked trajectory that pointed at it) the teacher
reads the trajectory (task text, actions, observations) with the `reflect` prompt and answers with an
exploration context, JSON {tools, apps, diagnosis, plan}. An unparsable or invalid reply is an
`explorations` row with its status and reason and no episodes. Then the teacher acts in the environment
under each context: R independent episodes (multi-round) of at most S replies (multi-step), each from the
task's initial state, in the ordinary agent loop. The context reaches the teacher as the episode's system
instructions (`explore` prompt). After the task's own turns come follow-up user turns asking it to explore
beyond the request (`explore_follow_up` prompt, `exploration_task`): a small teacher otherwise carries the
request out and stops, and its calls abstract to the explored task again.

Unguided exploration (the paper's "random exploration" ablation, and the bootstrap of D_0) gives the
teacher a world under a generic request and a few random tools instead (`unguided_target`).

A target whose signal names a tool (`Target.named_tool`, `named_tool.signal_tool`) can be pointed at it
(extensions, not the paper's): `named_tool_context` puts the tool's schema and its app's listing in the
context and the instructions (`explore_named_tool` prompt), `prefill_named_tool` starts the first reply of
each of its episodes with a call of it (`named_tool.PrefilledEngine`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from coevolve.agents.episodes import Episode, EpisodeLimits, run_episodes
from coevolve.agents.ledger import step_rows, trajectory_rows
from coevolve.agents.teacher import Teacher
from coevolve.core import content_hash
from coevolve.envs.base import Environment, EnvironmentWrapper, Observation, Task
from coevolve.llm.chat import describe_tool
from coevolve.llm.replies import JsonReplyError, extract_json, short_text
from coevolve.stages.explore.named_tool import PrefilledEngine, reply_prefixes, with_named_tool
from coevolve.stages.explore.prompting import REFLECT_PREFIX, render_prompt

MAX_FIELD_CHARS = 1000


MAX_TRAJECTORY_LINES = 40


GENERIC_PLAN = (
    "Call each of these tools at least once with argument values you can see, observe what "
    "they return and how they change the state, then combine them."
)


GENERIC_REQUEST = "Explore the tools you have: find out what they return and what they change."


TOOLS_PER_CONTEXT = 3


@dataclass(frozen=True)
class Target:
    """One thing to explore: a task's initial state, with the signal that pointed at it (if any)."""

    exploration_id: str
    task: Task
    kind: str
    signal_id: str | None = None
    trajectory_id: str | None = None
    steps: list[dict] = field(default_factory=list)
    """The marked trajectory's steps (for the reflection prompt)."""
    outcome: str = ""
    evidence: str = ""
    context: dict | None = None
    """A preset context (unguided bootstrap exploration); None = ask the teacher to reflect."""
    named_tool: str | None = None
    """The tool the signal names (`named_tool.signal_tool`), if any."""


@dataclass
class Exploration:
    target: Target
    reflection: str | None = None
    context: dict | None = None
    status: str = "ok"
    reason: str | None = None
    episodes: list[Episode] = field(default_factory=list)


ALLOTMENTS = ("priority", "round_robin")


def select_signals(signals: list[dict], kinds: tuple[str, ...], limit: int, allotment: str = "priority") -> list[dict]:
    """At most `limit` signals, one per task (and one per tool among `unused` signals, whose evidence names
    it). Each kind's signals rank newest round first, then by task id and the trajectory's sample index
    (`sample`, when the rows carry it), then id. Ids hash the run's name, so ranking by them alone would let
    two runs of one seed (two arms of an experiment) explore different trajectories.

    `priority`: kinds in `kinds` order, so a later kind gets what the earlier ones leave. `round_robin`
    (extension, not the paper's): one signal of each kind in turn, in `kinds` order, so that no kind starves.
    """
    if allotment not in ALLOTMENTS:
        raise ValueError(f"allotment: expected one of {list(ALLOTMENTS)}, got {allotment!r}")
    order = {kind: i for i, kind in enumerate(kinds)}
    ranked = sorted(
        (s for s in signals if s["kind"] in order),
        key=lambda s: (order[s["kind"]], -s["trajectory_round"], s["task_id"], s.get("sample", 0), s["signal_id"]),
    )
    queues = [iter(ranked)] if allotment == "priority" else [iter([s for s in ranked if s["kind"] == k]) for k in kinds]
    chosen, tasks, tools = [], set(), set()
    while queues and len(chosen) < limit:
        for queue in list(queues):  # a turn: each kind's next signal that is free (priority: one queue)
            signal = next((s for s in queue if _free(s, tasks, tools)), None)
            if signal is None:
                queues.remove(queue)
                continue
            tasks.add(signal["task_id"])
            tools.add(_unused_tool(signal))
            chosen.append(signal)
            if len(chosen) == limit:
                break
    return chosen


def _free(signal: dict, tasks: set, tools: set) -> bool:
    """Neither its task nor (an `unused` signal's) its tool is chosen yet."""
    tool = _unused_tool(signal)
    return signal["task_id"] not in tasks and (tool is None or tool not in tools)


def _unused_tool(signal: dict) -> str | None:
    if signal["kind"] != "unused":
        return None
    try:
        return json.loads(signal.get("evidence") or "{}").get("tool")
    except (ValueError, AttributeError):
        return None


def exploration_id(run: str, round_: int, key: str) -> str:
    return content_hash([run, round_, "explore", key])


def trajectory_text(steps: list[dict]) -> str:
    """Numbered actions with the environment's answers, as the reflection prompt shows them."""
    lines = []
    for i, step in enumerate(
        sorted(steps, key=lambda s: (s["step"], s["call_index"]))[:MAX_TRAJECTORY_LINES]
    ):
        if step["kind"] == "call":
            action = f"{step['tool']}({step['arguments']})"
            lines.append(
                f"{i + 1}. {action} -> {'' if step['ok'] else 'ERROR '}{short_text(step['observation'], 300)}"
            )
        elif step["kind"] == "parse_error":
            lines.append(f"{i + 1}. malformed tool call -> {short_text(step['observation'], 200)}")
        else:
            lines.append(f"{i + 1}. final answer: {short_text(step['reply'], 300)}")
    return "\n".join(lines) or "(the agent did nothing)"


def tools_text(tools: list[dict]) -> str:
    return "\n".join(describe_tool(tool) for tool in tools) or "(none)"


def reflection_messages(target: Target, tools: list[dict]) -> list[dict]:
    task_text = "\n".join(f"Turn {i + 1}: {turn}" for i, turn in enumerate(target.task.turns))
    prompt = render_prompt(
        "reflect",
        signal=f"{target.kind} {target.evidence}".strip(),
        task=task_text,
        tools=tools_text(tools),
        trajectory=trajectory_text(target.steps),
        outcome=target.outcome or "unknown",
    )
    return [{"role": "user", "content": prompt}]


def parse_context(reply: str, tool_names: set[str]) -> tuple[dict | None, str, str | None]:
    """(context, status, reason) from a reflection reply; status ok | unparsable | invalid."""
    try:
        obj = extract_json(reply, dict)
    except JsonReplyError as exc:
        return None, "unparsable", str(exc)
    plan, diagnosis = obj.get("plan"), obj.get("diagnosis", "")
    if not isinstance(plan, str) or not plan.strip():
        return None, "invalid", "the context has no 'plan' text"
    tools = obj.get("tools") if isinstance(obj.get("tools"), list) else []
    apps = obj.get("apps") if isinstance(obj.get("apps"), list) else []
    context = {
        "tools": [t for t in tools if isinstance(t, str) and t in tool_names],
        "unknown_tools": [short_text(t, 64) for t in tools if not (isinstance(t, str) and t in tool_names)][
            :10
        ],
        "apps": [short_text(a, 64) for a in apps if isinstance(a, str)][:10],
        "diagnosis": short_text(diagnosis if isinstance(diagnosis, str) else "", MAX_FIELD_CHARS),
        "plan": short_text(plan, MAX_FIELD_CHARS),
    }
    return context, "ok", None


def generic_context(tools: list[str]) -> dict:
    """The context of unguided exploration: some tools and a generic plan."""
    return {
        "tools": tools,
        "unknown_tools": [],
        "apps": [],
        "diagnosis": "none (unguided exploration)",
        "plan": GENERIC_PLAN,
    }


def exploration_task(task: Task, follow_ups: int) -> Task:
    """The task an exploration episode runs: `task` (same id, state and checker) with `follow_ups` more user
    turns, each asking to explore beyond the request. Replays of the episode (`stages.triples.grouping`) run it too,
    so that the environment keeps the episode open for the same turns."""
    follow_up = render_prompt("explore_follow_up").strip()
    return task.model_copy(update={"turns": [*task.turns, *[follow_up] * follow_ups]})


class ContextEnv(EnvironmentWrapper):
    """An environment whose `reset` opens the conversation with per-task system instructions; everything
    else is the inner environment's."""

    def __init__(self, inner: Environment, instructions: dict[str, str]) -> None:
        super().__init__(inner)
        self.instructions = instructions

    def reset(self, task: Task, *, seed: int = 0) -> Observation:
        obs = self.inner.reset(task, seed=seed)
        text = self.instructions.get(task.id)
        messages = [{"role": "system", "content": text}, *obs.messages] if text else obs.messages
        return Observation(messages=messages, tools=obs.tools)


NAMED_LISTING_STEP = ("First call {listing} (it takes no arguments) to see which values exist, then call {tool} with "
                      "values it shows.")
NAMED_CALL_STEP = "Call {tool} with argument values you have seen."


def explore_instructions(context: dict) -> str:
    """The `explore` prompt for `context`; a context that names a tool (`named_tool.with_named_tool`) adds
    the `explore_named_tool` prompt with its schema and listing."""
    text = render_prompt(
        "explore",
        tools=", ".join(context["tools"]) or "any",
        diagnosis=context["diagnosis"] or "unknown",
        plan=context["plan"],
    )
    if not context.get("named_tools"):
        return text
    tool, listing = context["named_tools"][0], context.get("listing")
    step = (NAMED_LISTING_STEP if listing else NAMED_CALL_STEP).format(tool=tool, listing=listing)
    schema = json.dumps(context["named_tool_schema"], sort_keys=True)
    return text.rstrip("\n") + "\n\n" + render_prompt("explore_named_tool", tool=tool, schema=schema, step=step)


def offered_tools(make_env: Callable[[], Environment], task: Task) -> list[dict]:
    env = make_env()
    try:
        return env.reset(task).tools
    finally:
        env.close()


def explore(
    teacher: Teacher,
    make_env: Callable[[], Environment],
    targets: list[Target],
    *,
    rounds: int,
    steps: int,
    seed: int,
    follow_ups: int = 0,
    progress: Callable[[int], None] | None = None,
    named_tool_context: bool = False,
    prefill_named_tool: bool = False,
    prefill_arguments: bool = False,
    prefill_listing_first: bool = False,
    prefill_listing_call: bool = False,
) -> list[Exploration]:
    """Reflect on each target (unless its context is preset), then run `rounds` episodes per context, each
    with `follow_ups` turns after the task's own (`exploration_task`). `progress(n)` counts episodes
    (`rounds` per target: a target without a context counts as done at once). A target that names a tool:
    `named_tool_context` adds its schema and listing to the context, `prefill_named_tool` starts each of its
    episodes' first reply with a call of it (`prefill_arguments`: on into its first parameter's value;
    `prefill_listing_first`: the first reply calls its app's listing, the second it: `reply_prefixes`;
    `prefill_listing_call`: that first reply is the listing's whole call)."""
    explorations = [Exploration(t, context=t.context) for t in targets]
    asking, tools = [], {}
    for x in explorations:
        if x.context is not None:
            continue
        try:
            tools[x.target.exploration_id] = offered_tools(make_env, x.target.task)
            asking.append(x)
        except Exception as exc:  # a task the environment cannot reset is a row, not a crash
            x.status, x.reason = "error", f"reset failed: {short_text(str(exc), 300)}"
    conversations = [reflection_messages(x.target, tools[x.target.exploration_id]) for x in asking]
    sampling = teacher.settings.text_sampling(seed)
    replies = (
        teacher.complete(conversations, sampling, reply_prefix=REFLECT_PREFIX)
        if conversations
        else []
    )
    for x, reply in zip(asking, replies, strict=True):
        names = {t["function"]["name"] for t in tools[x.target.exploration_id]}
        x.reflection = reply
        x.context, x.status, x.reason = parse_context(reply, names)
        if x.status == "ok" and named_tool_context and x.target.named_tool:
            x.context = with_named_tool(x.context, tools[x.target.exploration_id], x.target.named_tool)
    ready = [x for x in explorations if x.status == "ok"]
    if progress and len(ready) < len(explorations):
        progress(rounds * (len(explorations) - len(ready)))
    instructions = {x.target.task.id: explore_instructions(x.context) for x in ready}
    def prefixes_of(x: Exploration) -> tuple[str, ...]:
        if not (prefill_named_tool and x.target.named_tool):
            return ()
        offered = tools.get(x.target.exploration_id) or offered_tools(make_env, x.target.task)
        listing = x.context.get("listing") if prefill_listing_first else None
        return reply_prefixes(x.target.named_tool, offered, arguments=prefill_arguments, listing=listing,
                              whole_listing=prefill_listing_call)

    prefixes = {id(x): prefixes_of(x) for x in ready}
    for x in ready:
        if prefixes[id(x)]:  # recorded with the context, for the audit of what the teacher was given
            x.context = {**x.context, "prefilled_tool": x.target.named_tool}
    for prefix in dict.fromkeys(prefixes.values()):  # one batch per prefix; without prefill, one batch
        batch = [x for x in ready if prefixes[id(x)] == prefix]
        engine = (PrefilledEngine(teacher.engine, prefix, teacher.chat.encode, teacher.chat.end_of_turn_id)
                  if prefix else teacher.engine)  # fmt: skip
        jobs = [(exploration_task(x.target.task, follow_ups), k) for x in batch for k in range(rounds)]
        episodes = run_episodes(
            engine,
            teacher.chat,
            lambda: ContextEnv(make_env(), instructions),
            jobs,
            teacher.settings.step_sampling(seed),
            EpisodeLimits(steps, teacher.settings.max_context_tokens),
            seed=seed,
            progress=progress,
        )
        for i, x in enumerate(batch):
            x.episodes = episodes[i * rounds : (i + 1) * rounds]
    return explorations


def exploration_artifacts(explorations: list[Exploration], *, run: str, round_: int, teacher: str) -> dict:
    """`explorations`, `trajectories` (source explore) and `steps` rows."""
    rows, trajectories, steps = [], [], []
    for x in explorations:
        traj = trajectory_rows(x.episodes, run=run, round_=round_, source="explore", policy=teacher)
        trajectories += traj
        steps += step_rows(x.episodes, traj)
        t = x.target
        rows.append(
            {
                "exploration_id": t.exploration_id,
                "signal_id": t.signal_id,
                "kind": t.kind,
                "task_id": t.task.id,
                "trajectory_id": t.trajectory_id,
                "teacher": teacher,
                "reflection": x.reflection,
                "context": None if x.context is None else json.dumps(x.context),
                "status": x.status,
                "reason": x.reason,
                "trajectory_ids": json.dumps([r["trajectory_id"] for r in traj]),
                "task": json.dumps(t.task.to_row()),
            }
        )
    return {"explorations": rows, "trajectories": trajectories, "steps": steps}


def unguided_target(
    make_env: Callable[[], Environment], world: Task, rng: random.Random, *, exploration_id: str, kind: str,
    task_id: str,
) -> Target:
    """Explore `world`'s initial state under a generic request and a few random tools (no signal); the
    explored task is `world` with that request, named `task_id`."""
    task = world.model_copy(
        update={"id": task_id, "split": "explore", "family": "unguided", "turns": [GENERIC_REQUEST], "lineage": {}}
    )
    names = [t["function"]["name"] for t in offered_tools(make_env, task)]
    tools = rng.sample(names, min(TOOLS_PER_CONTEXT, len(names)))
    return Target(exploration_id, task, kind, context=generic_context(tools))


def explored_tasks(explorations: list[dict]) -> dict[str, Task]:
    """The task each exploration explored (as its episodes ran it, before follow-up turns), by exploration id."""
    return {x["exploration_id"]: Task.from_row(json.loads(x["task"])) for x in explorations}
