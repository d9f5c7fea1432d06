"""The multi-turn agent loop: run many episodes at once with one engine, token-in/token-out.

Every live episode's context is a list of token ids. At each generation step all live episodes are sent
to the engine together (the engine sub-batches them), or, to an engine that serves requests independently
(`independent_requests`: a server batching continuously), each episode sends its next request as soon as its
own reply is stepped; each reply's exact sampled ids are appended with
loss mask 1 and the sampler's log-probs, then the environment's answer (tool results, next user turn) is
appended as template tokens with mask 0. Nothing is ever re-tokenised for training.

Used by rollout (K samples per task), evaluate (`eval.samples` per task, at most `eval.max_live_episodes`
in flight), exploration and verification.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from coevolve.envs.base import Environment, Evaluation, StepResult, Task
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import Completion, Engine, SamplingParams

_SESSIONS = itertools.count()


@dataclass(frozen=True)
class EpisodeLimits:
    max_replies: int = 8
    max_context_tokens: int = 2048


@dataclass
class Episode:
    """One running or finished episode: its token stream, conversation and ledger rows."""

    task: Task
    sample: int
    env: Environment
    session: int = field(default_factory=lambda: next(_SESSIONS))
    """Engine session id: lets the engine reuse this episode's KV cache from one reply to the next."""
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    replies: int = 0
    turn: int = 0
    finish: str = ""
    error: str | None = None
    evaluation: Evaluation | None = None
    versions: set[str] = field(default_factory=set)
    """Policy versions that sampled the replies (one, unless weights changed mid-episode)."""

    @property
    def completion_tokens(self) -> int:
        return sum(self.loss_mask)

    def append(self, ids: list[int], *, policy: bool, logprobs: list[float] | None = None) -> None:
        self.input_ids.extend(ids)
        self.loss_mask.extend([int(policy)] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


def run_episodes(
    engine: Engine,
    chat: ChatFormat,
    make_env: Callable[[], Environment],
    jobs: list[tuple[Task, int]],
    sampling: SamplingParams,
    limits: EpisodeLimits,
    *,
    seed: int = 0,
    max_live: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Episode]:
    """Run one episode per `(task, sample)` job to the end; returns them in job order. At most `max_live`
    episodes are in flight at once (None: all): each holds an environment and, in the in-process engine,
    its KV cache between replies, so this bounds memory; a waiting job starts as soon as one ends."""
    if max_live is not None and max_live < 1:
        raise ValueError(f"max_live must be >= 1, got {max_live}")
    if getattr(engine, "independent_requests", False):
        return _run_each(engine, chat, make_env, jobs, sampling, limits, seed, max_live, progress)
    episodes: list[Episode] = []
    waiting = iter(jobs)
    live: list[Episode] = []

    def admit() -> None:
        while max_live is None or len(live) < max_live:
            job = next(waiting, None)
            if job is None:
                return
            ep = _start(job[0], job[1], make_env, chat, seed)
            episodes.append(ep)
            if ep.finish:  # could not even start: recorded with its error
                _end(ep, progress)
            else:
                live.append(ep)

    admit()
    while live:
        completions = engine.generate([ep.input_ids for ep in live], sampling,
                                      sessions=[ep.session for ep in live])
        results = _step_all([ep.env for ep in live], [c.text for c in completions])
        for ep, completion, result in zip(live, completions, results, strict=True):
            _advance(ep, completion, result, chat, sampling, limits)
            if ep.finish:
                _end(ep, progress)
        engine.end_sessions([ep.session for ep in live if ep.finish])
        live[:] = [ep for ep in live if not ep.finish]
        admit()
    return episodes


def _run_each(engine: Engine, chat: ChatFormat, make_env: Callable[[], Environment], jobs: list[tuple[Task, int]],
              sampling: SamplingParams, limits: EpisodeLimits, seed: int, max_live: int | None,
              progress: Callable[[int], None] | None) -> list[Episode]:  # fmt: skip
    """Each episode on its own: its next request goes out as soon as its own reply is stepped, not when the
    step's slowest reply is in, so a server that batches requests continuously (`independent_requests`:
    vLLM behind `OpenAIEngine`) keeps every live episode in its batch. Job i samples with seed + i, as
    prompt i of a batched call does."""
    lock = threading.Lock()

    def one(index: int, job: tuple[Task, int]) -> Episode:
        ep = _start(job[0], job[1], make_env, chat, seed)
        own = sampling if sampling.seed is None else replace(sampling, seed=sampling.seed + index)
        while not ep.finish:
            completion = engine.generate([ep.input_ids], own, sessions=[ep.session])[0]
            _advance(ep, completion, _step_all([ep.env], [completion.text])[0], chat, sampling, limits)
        engine.end_sessions([ep.session])
        _close(ep)
        with lock:
            if progress:
                progress(1)
        return ep

    # at most the engine's own bound on requests in flight (`OpenAIEngine.max_concurrency`) at once
    workers = min(max_live or len(jobs), len(jobs), getattr(engine, "max_concurrency", len(jobs)))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, range(len(jobs)), jobs))


def _end(ep: Episode, progress: Callable[[int], None] | None) -> None:
    _close(ep)
    if progress:
        progress(1)


def _start(task: Task, sample: int, make_env: Callable[[], Environment], chat: ChatFormat, seed: int) -> Episode:
    ep = Episode(task=task, sample=sample, env=make_env())
    try:
        obs = ep.env.reset(task, seed=seed + sample)
        demos = ep.env.demonstrations()
        ep.append(chat.prompt_ids(obs.messages, tools=obs.tools, demonstrations=demos), policy=False)
        ep.messages = list(obs.messages)
        ep.prompt_tokens = len(ep.input_ids)
    except Exception as exc:  # a broken task is a row with a reason, not a crashed round
        _fail(ep, exc)
    return ep


def _step_all(envs: list[Environment], replies: list[str]) -> list[StepResult | Exception]:
    """Step every live episode with its reply. Every step is submitted (`Environment.submit_step`) before
    the first result is awaited, so environments that step elsewhere (Ray actors, `executors.ray_envs`)
    step in parallel; in-process ones step one after the other. A step's exception is returned in its
    place."""
    pending = [env.submit_step(reply) for env, reply in zip(envs, replies, strict=True)]
    results: list[StepResult | Exception] = []
    for wait in pending:
        try:
            results.append(wait())
        except Exception as exc:
            results.append(exc)
    return results


def _advance(ep: Episode, completion: Completion, result: StepResult | Exception, chat: ChatFormat,
             sampling: SamplingParams, limits: EpisodeLimits) -> None:
    ep.append(completion.token_ids, policy=True, logprobs=completion.logprobs)
    if completion.version:
        ep.versions.add(completion.version)
    ep.replies += 1
    ep.messages.append({"role": "assistant", "content": completion.text})
    if isinstance(result, Exception):
        _fail(ep, result)
        return
    ep.steps.extend(_step_rows(ep, completion.text, result.info))
    if result.turn_ended:
        ep.turn += 1
    if result.done:
        ep.finish = "done"
        return
    ep.messages.extend(result.messages)
    ep.append(chat.continuation_ids(result.messages, last_token_id=completion.token_ids[-1]).ids, policy=False)
    if ep.replies >= limits.max_replies:
        ep.finish = "max_steps"
    elif len(ep.input_ids) + sampling.max_new_tokens > limits.max_context_tokens:
        ep.finish = "context"


def _step_rows(ep: Episode, reply: str, info: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"step": ep.replies - 1, "turn": ep.turn, "reply": reply}
    rows = []
    for call in info.get("calls", []):
        ok = bool(call.get("ok"))
        observation = call.get("result") if ok else call.get("error")
        rows.append({**base, "kind": "call", "tool": call.get("name"), "ok": ok,
                     "arguments": json.dumps(call.get("arguments", {}), default=str),
                     "observation": _text(observation)})
    for error in info.get("parse_errors", []):
        rows.append({**base, "kind": "parse_error", "tool": None, "arguments": None, "ok": False,
                     "observation": _text(error)})
    if not rows:
        rows.append({**base, "kind": "answer", "tool": None, "arguments": None, "ok": True, "observation": ""})
    return [{**row, "call_index": i} for i, row in enumerate(rows)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _fail(ep: Episode, exc: BaseException) -> None:
    ep.finish = "error"
    ep.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _close(ep: Episode) -> None:
    if ep.finish != "error":
        try:
            ep.evaluation = ep.env.evaluate()
        except Exception as exc:
            _fail(ep, exc)
    if ep.evaluation is None:
        ep.evaluation = Evaluation(reward=0.0, success=False, details={"error": ep.error})
    with contextlib.suppress(Exception):  # closing must not lose the episode's rows
        ep.env.close()
