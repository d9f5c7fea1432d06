"""Supervised warm start: reference episodes render like rollouts, and training raises their likelihood."""

from __future__ import annotations

import json

import pytest
import torch

from coevolve import envs
from coevolve.agents.reference import reference_sample, reference_samples
from coevolve.config import load_config
from coevolve.llm.chat import ChatFormat
from coevolve.llm.models import load_model
from coevolve.llm.toolcalls import render_tool_call
from coevolve.rl.update import micro_batch_logprobs
from coevolve.rl.warm_start import WarmStart, warm_start
from coevolve.stages.warm_start.build import RECORD, warm_start_checkpoint, warm_start_tasks
from tests.conftest import CONFIGS


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_model("tiny-random-llama")
    return model, tokenizer, ChatFormat(tokenizer)


def test_reference_sample_masks_exactly_the_reference_replies(tiny):
    _, tokenizer, chat = tiny
    env = envs.make("toolworld", seed=3)
    task = next(t for t in env.tasks("train") if len(t.turns) > 1 or len(t.solution[0]) > 1)
    ids, mask = reference_sample(env, chat, task)
    assert len(ids) == len(mask) and mask[0] == 0
    policy = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    calls = [render_tool_call(call) for turn in task.solution for call in turn]
    for text in calls:
        assert text in policy
    assert policy.count("<|im_end|>") == len(calls) + len(
        task.turns
    )  # one reply per call + one answer per turn
    # the same episode, replayed, satisfies the checker: the sample teaches a solution
    assert env.evaluate().success


def test_warm_start_raises_the_likelihood_of_the_references(tiny):
    model, _, chat = tiny
    model = type(model)(model.config)  # a fresh copy: the module fixture's weights stay untouched
    model.load_state_dict(load_model("tiny-random-llama")[0].state_dict())
    env = envs.make("toolworld", seed=3)
    samples = reference_samples(env, chat, env.tasks("train")[:6])
    assert len(set(samples.group_ids)) == len({t.family for t in env.tasks("train")[:6]})

    def nll() -> float:
        with torch.no_grad():
            lp = micro_batch_logprobs(model, samples, list(range(6)), temperature=1.0, shared_prefix=False)
        mask = samples.pad(list(range(6))).loss_mask
        return float(-(lp * mask).sum() / mask.sum())

    before = nll()
    losses = warm_start(model, samples, WarmStart(tasks=6, epochs=3, lr=1e-3, batch_size=4))
    assert len(losses) >= 3 and all(loss > 0 for loss in losses)
    assert nll() < before - 0.5


def test_warm_start_tasks_never_overlap_the_runs_splits():
    config = load_config(CONFIGS / "test-tiny.yaml")
    tasks = warm_start_tasks(config, WarmStart(tasks=20))
    run_env = envs.make(config.env.name, **config.env.options)
    taken = {t.id for split in run_env.splits() for t in run_env.tasks(split)}
    assert len(tasks) == 20 and not taken & {t.id for t in tasks}
    assert {t.family for t in tasks} <= {t.family for t in run_env.tasks("train")}


@pytest.mark.slow
def test_warm_start_checkpoint_is_built_once_and_loadable(tmp_path):
    config = load_config(CONFIGS / "test-tiny.yaml")
    settings = WarmStart(tasks=4, epochs=1, batch_size=4)
    path = warm_start_checkpoint(config, settings, tmp_path)
    record = json.loads((path / RECORD).read_text())
    assert len(record["task_ids"]) == 4 and len(record["losses"]) >= 1
    stamp = (path / RECORD).stat().st_mtime_ns
    assert (
        warm_start_checkpoint(config, settings, tmp_path) == path
        and (path / RECORD).stat().st_mtime_ns == stamp
    )
    model, _ = load_model(str(path))
    assert model.config.model_type == "llama"


@pytest.mark.slow
def test_teacher_checkpoint_starts_from_a_checkpoint_and_is_built_once(tmp_path):
    from coevolve.stages.warm_start.build import teacher_checkpoint

    config = load_config(CONFIGS / "test-tiny.yaml")
    settings = WarmStart(tasks=4, epochs=1, batch_size=4, seed=1)
    start = warm_start_checkpoint(config, WarmStart(tasks=2, epochs=1, batch_size=2, teacher=False), tmp_path)
    path = teacher_checkpoint(config, start, settings, tmp_path)
    record = json.loads((path / RECORD).read_text())
    assert record["start"] == f"warm-start/{start.name}" and 0 < record["explorations"] <= 4
    assert record["examples"] == 4 + 4 + record["explorations"]
    assert len(record["distractors"]) == 4 and all(0 <= n <= 3 for n in record["distractors"])
    assert teacher_checkpoint(config, start, settings, tmp_path) == path
    model, _ = load_model(str(path))
    assert model.config.model_type == "llama"


def test_teacher_key_follows_a_built_start_across_storage_roots_and_a_plain_path_as_given(tmp_path):
    from coevolve.stages.warm_start.build import teacher_key

    config = load_config(CONFIGS / "test-tiny.yaml")
    settings = WarmStart(tasks=4, seed=1)
    starts = [tmp_path / root / "warm-start" / "73f099cdb003" for root in ("a", "b")]
    plain = [tmp_path / "c" / "73f099cdb003", tmp_path / "d" / "73f099cdb003"]
    unbuilt = tmp_path / "e" / "warm-start" / "73f099cdb003"  # a report of stored runs names it, never builds it
    for start in starts:
        start.mkdir(parents=True)
        (start / RECORD).write_text("{}")
    assert teacher_key(config, starts[0], settings) == teacher_key(config, starts[1], settings)
    assert teacher_key(config, unbuilt, settings) == teacher_key(config, starts[0], settings)
    assert teacher_key(config, plain[0], settings) != teacher_key(config, plain[1], settings)
    assert teacher_key(config, starts[0], settings) != teacher_key(config, starts[0], WarmStart(tasks=8, seed=1))


def test_warm_start_settings_are_validated():
    with pytest.raises(ValueError, match="epochs"):
        WarmStart(epochs=0)
    with pytest.raises(ValueError, match="lr"):
        WarmStart(lr=0.0)


@pytest.mark.parametrize("distractors", [0, 2, 3])
def test_abstraction_example_is_a_reply_the_real_parser_accepts(tiny, distractors):
    from coevolve.llm.replies import extract_json
    from coevolve.stages.abstract.abstraction import parse_task
    from coevolve.stages.abstract.prompting import ABSTRACT_PREFIX
    from coevolve.stages.warm_start.teacher_examples import abstraction_sample

    _, tokenizer, chat = tiny
    env = envs.make("toolworld", seed=3)
    # the longest reference: 4 calls and 3 distractors are more calls than a turn's step limit (6)
    task = max(env.tasks("train"), key=lambda t: sum(map(len, t.solution)))
    ids, mask = abstraction_sample(env, chat, task, max_tasks=3, distractors=distractors)
    prompt = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "OBSERVED CALLS" in prompt and prompt.endswith(ABSTRACT_PREFIX)
    reply = ABSTRACT_PREFIX + tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m][:-1])
    (item,) = extract_json(reply, list)
    calls = json.loads(prompt.split("OBSERVED CALLS (JSON):\n")[1].split("\n")[0])
    observed = [{"tool": c["tool"], "arguments": c["arguments"], "observation": c["result"]} for c in calls]
    parsed = parse_task(item, observed)
    reference = [call for turn in task.solution for call in turn]
    assert len(observed) == len(reference) + distractors  # the distractors are observed, not in the solution
    assert [(c["name"], c["arguments"]) for c in parsed["solution"]] == [(c.name, c.arguments) for c in reference]
    assert parsed["query"] == " ".join(task.turns)


@pytest.mark.parametrize("calls", [1, 2])
def test_reflection_example_is_a_reply_the_real_parser_accepts(tiny, calls):
    from coevolve.stages.explore.exploration import parse_context
    from coevolve.stages.explore.prompting import REFLECT_PREFIX
    from coevolve.stages.warm_start.teacher_examples import reflection_sample

    _, tokenizer, chat = tiny
    env = envs.make("toolworld", seed=3)
    task = next(t for t in env.tasks("train") if sum(map(len, t.solution)) == calls)
    ids, mask = reflection_sample(env, chat, task)
    prompt = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "Signal: boundary" in prompt and prompt.endswith(REFLECT_PREFIX)
    reference = [call for turn in task.solution for call in turn]
    attempt = prompt.split("What the agent did")[1]
    # the attempt holds every reference call but the last, then gives up
    assert [c.name for c in reference[:-1]] == [c.name for c in reference if f"{c.name}(" in attempt][: calls - 1]
    assert "final answer: Done." in attempt and "failure" in attempt
    reply = REFLECT_PREFIX + tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m][:-1])
    names = {t["function"]["name"] for t in env.reset(task).tools}
    context, status, reason = parse_context(reply, names)
    assert (status, reason) == ("ok", None)
    assert context["tools"] == list(dict.fromkeys(c.name for c in reference)) and reference[-1].name in context["diagnosis"]


def test_other_values_are_the_listings_alternatives_to_a_value():
    from coevolve.stages.warm_start.teacher_examples import other_values

    assert other_values(["/a.txt", "/b.txt", "/c.txt"], "/b.txt") == ["/a.txt", "/c.txt"]
    accounts = [{"account_id": "BIZ-4", "balance": 1.0}, {"account_id": "TRV-9", "balance": 2.0}, {"label": "x"}]
    assert other_values(accounts, "TRV-9") == ["BIZ-4"]
    assert other_values({"items": accounts}, "BIZ-4") == ["TRV-9"]  # nested
    assert other_values(accounts, "SAV-1") == [] and other_values("no listing", "BIZ-4") == []


def test_exploration_example_goes_past_the_request_with_a_value_a_listing_showed(tiny):
    import random

    from coevolve.stages.explore.exploration import exploration_task
    from coevolve.stages.warm_start.teacher_examples import exploration_sample

    _, tokenizer, chat = tiny
    env = envs.make("toolworld", seed=3)
    task = next(t for t in env.tasks("train") if t.family == "bank_balance")
    ids, mask = exploration_sample(env, chat, task, rng=random.Random(0))
    text = tokenizer.decode(ids)
    (reference,) = task.solution[0]
    follow_up = exploration_task(task, 1).turns[-1]
    assert "Exploration plan: Call get_balance" in text and follow_up in text  # as the explore stage prompts
    replies = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m]).split("<|im_end|>")
    assert replies[0].strip() == render_tool_call(reference).strip()  # the request first
    listing, variant = replies[2], replies[3]  # then, after the request's answer: list, and read another
    assert '"list_accounts"' in listing and '"get_balance"' in variant
    other = json.loads(variant.split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["account_id"]
    assert other != reference.arguments["account_id"] and other in task.initial_state["bank"]["accounts"]
    assert text.index(follow_up) < text.index(listing.strip())
    no_listing = next(t for t in env.tasks("train") if t.family == "write_note")  # a new path: nothing lists it
    assert exploration_sample(env, chat, no_listing) is None
