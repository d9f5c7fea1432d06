"""Against an engine that serves requests one by one (`independent_requests`, a vLLM server behind
`OpenAIEngine`), each episode goes on without waiting for the others' replies: a slow reply holds up only
its own episode, so a continuously batching server keeps the rest busy. Each job samples with seed + its
index, and the episodes come back in job order. The in-process engine keeps the batched loop (one call per
generation step with every live episode)."""

from __future__ import annotations

import threading

import pytest

from coevolve import envs
from coevolve.agents.episodes import EpisodeLimits, run_episodes
from coevolve.llm.chat import ChatFormat
from coevolve.llm.engine import Completion, SamplingParams
from coevolve.llm.models import load_model

WAIT_S = 10.0


class OneByOneEngine:
    """Answers every prompt with the same final answer. The first request waits until every other episode
    has ended (or `WAIT_S` passed), as a long reply would; records each call's prompts and seed."""

    def __init__(self, tokenizer, *, independent: bool) -> None:
        self.tokenizer, self.version, self.independent_requests = tokenizer, "v", independent
        self.others_done, self.calls, self.first_waited_for_others = threading.Event(), [], None
        self._lock = threading.Lock()

    def generate(self, prompts, sampling, *, progress=None, sessions=None):
        with self._lock:
            first = not self.calls
            self.calls.append((len(prompts), sampling.seed))
        if first:
            self.first_waited_for_others = self.others_done.wait(WAIT_S)
        ids = [*self.tokenizer("The balance is unknown.", add_special_tokens=False)["input_ids"],
               self.tokenizer.eos_token_id]  # fmt: skip
        return [Completion(ids, [-0.5] * len(ids), "The balance is unknown.", "stop", self.version) for _ in prompts]

    def end_sessions(self, sessions):
        pass


@pytest.fixture(scope="module")
def setup():
    env = envs.make("toolworld", seed=0)
    tasks = [t for t in env.tasks("train") if len(t.turns) == 1][:2]
    tokenizer = load_model("tiny-random-llama")[1]
    return tasks, ChatFormat(tokenizer), tokenizer


def run(setup, *, independent: bool):
    tasks, chat, tokenizer = setup
    engine = OneByOneEngine(tokenizer, independent=independent)
    jobs = [(task, k) for task in tasks for k in range(2)]
    ended = []

    def progress(n: int) -> None:
        ended.append(n)
        if len(ended) == len(jobs) - 1:
            engine.others_done.set()

    episodes = run_episodes(engine, chat, lambda: envs.make("toolworld", seed=0), jobs,
                            SamplingParams(max_new_tokens=16, seed=100), EpisodeLimits(4, 2048), progress=progress)  # fmt: skip
    return engine, jobs, episodes


def test_a_slow_reply_holds_up_only_its_own_episode(setup):
    engine, jobs, episodes = run(setup, independent=True)
    assert engine.first_waited_for_others is True  # the three others ended while the first reply was out
    assert [(ep.task.id, ep.sample) for ep in episodes] == [(t.id, k) for t, k in jobs]
    assert all(ep.finish == "done" and ep.replies == 1 for ep in episodes)
    assert sorted(seed for _, seed in engine.calls) == [100, 101, 102, 103]  # seed + job index
    assert all(size == 1 for size, _ in engine.calls)


def test_the_in_process_engine_keeps_one_call_per_generation_step(setup):
    engine, jobs, episodes = run(setup, independent=False)
    assert engine.calls == [(len(jobs), 100)] and engine.first_waited_for_others is False
    assert all(ep.finish == "done" for ep in episodes)
