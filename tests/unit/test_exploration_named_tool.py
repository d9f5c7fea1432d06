"""Exploration pointed at what the signals name (extensions, not the paper's): explorations allotted across
kinds, the named tool's schema and listing in the context, the first reply prefilled with its call."""

from __future__ import annotations

import json

import pytest

from coevolve.config import ConfigError, load_config
from coevolve.llm.engine import Completion
from coevolve.stages.explore.exploration import Target, exploration_artifacts, explore, select_signals
from coevolve.stages.explore.named_tool import app_listing, call_prefix, signal_tool
from tests.conftest import CONFIGS
from tests.fakes.teacher import ScriptedTeacher
from tests.unit.evolution_world import VALID, family, make_env

KINDS = ("forgetting", "boundary", "rare", "unused")


def signal(sid: str, kind: str, task: str, round_: int = 5, tool: str | None = None) -> dict:
    evidence = json.dumps({"tool": tool, "offered_trajectories": 1, "window_calls": 0}) if tool else "{}"
    return {"signal_id": sid, "kind": kind, "task_id": task, "trajectory_round": round_, "evidence": evidence}


SIGNALS = [
    *[signal(f"f{i}", "forgetting", f"tf{i}") for i in range(5)],
    signal("b0", "boundary", "tf0"), signal("b1", "boundary", "tb1"),
    signal("r0", "rare", "tr0"),
    signal("u0", "unused", "tb1", tool="gap_a"), signal("u1", "unused", "tu1", tool="gap_a", round_=4),
    signal("u2", "unused", "tu2", tool="gap_b"), signal("u3", "unused", "tu3", tool="gap_b", round_=3),
]


def test_priority_lets_the_first_kind_take_everything():
    chosen = select_signals(SIGNALS, KINDS, 4)
    assert [s["signal_id"] for s in chosen] == ["f0", "f1", "f2", "f3"]
    assert select_signals(SIGNALS, KINDS, 4, "priority") == chosen


def test_round_robin_takes_one_per_kind_in_turn_one_per_task_and_one_per_unused_tool():
    chosen = select_signals(SIGNALS, KINDS, 4, "round_robin")
    # boundary's first signal is on tf0, already taken by forgetting: its next one goes in its turn
    assert [s["signal_id"] for s in chosen] == ["f0", "b1", "r0", "u2"]  # u0's task tb1 is taken by b1
    more = select_signals(SIGNALS, KINDS, 10, "round_robin")
    # u1 names gap_a, which u0 could not take; u3 names gap_b, which u2 took
    assert [s["signal_id"] for s in more] == ["f0", "b1", "r0", "u2", "f1", "u1", "f2", "f3", "f4"]
    assert len({s["task_id"] for s in more}) == len(more)
    with pytest.raises(ValueError, match="allotment"):
        select_signals(SIGNALS, KINDS, 4, "lottery")


def test_the_allotment_is_a_config_field_with_priority_by_default():
    assert load_config(CONFIGS / "test-tiny.yaml").explore.allotment == "priority"
    assert load_config(CONFIGS / "test-tiny.yaml", ["explore.allotment=round_robin"]).explore.allotment == "round_robin"
    with pytest.raises(ConfigError, match="explore.allotment"):
        load_config(CONFIGS / "test-tiny.yaml", ["explore.allotment=lottery"])
    with pytest.raises(ConfigError, match="explore.max_explorations"):
        load_config(CONFIGS / "test-tiny.yaml", ["explore.max_explorations=1000000000"])


def test_a_signal_names_its_unused_tool_or_its_rarest_tool_pattern():
    assert signal_tool("unused", json.dumps({"tool": "deposit"})) == "deposit"
    rare = {"pattern_kind": "tool", "patterns": [{"pattern": "withdraw", "count": 1}, {"pattern": "x", "count": 2}]}
    assert signal_tool("rare", json.dumps(rare)) == "withdraw"
    assert signal_tool("rare", json.dumps({**rare, "pattern_kind": "bigram"})) is None
    assert signal_tool("boundary", json.dumps({"tool": "deposit"})) is None
    assert signal_tool("unused", "not json") is None


def test_the_listing_of_a_tools_app_comes_from_the_offered_tools(world):
    env = make_env()
    bank = env.reset(family(world.train, "bank_balance")).tools
    assert app_listing(bank, "deposit") == "list_accounts" and app_listing(bank, "list_accounts") is None
    def spec(name: str, required: tuple = ()) -> dict:
        parameters = {"properties": {r: {} for r in required}, "required": list(required)}
        return {"type": "function", "function": {"name": name, "description": "", "parameters": parameters}}

    prefixed = [spec("music__list_songs"), spec("mail__list_mails"), spec("mail__delete_mail", ["mail_id"])]
    assert app_listing(prefixed, "mail__delete_mail") == "mail__list_mails"
    assert app_listing([spec("checkout"), spec("get", ["x"])], "get") is None  # no listing: schema only


class PrefillCompleter:
    """The scripted teacher's engine, except that a reply started by a call prefix is closed with no arguments."""

    def __init__(self, inner):
        self.inner, self.tokenizer, self.version = inner, inner.tokenizer, inner.version
        self.prompts: list[str] = []

    def generate(self, prompts, sampling, *, progress=None, sessions=None):
        texts = [self.tokenizer.decode(p, skip_special_tokens=False) for p in prompts]
        self.prompts += texts
        out = self.inner.generate(prompts, sampling, progress=progress, sessions=sessions)
        closing = "{}}\n</tool_call>"
        ids = list(self.tokenizer(closing, add_special_tokens=False)["input_ids"]) + [self.inner.end_id]
        return [Completion(ids, [0.0] * len(ids), closing, "stop") if t.endswith('"arguments": ') else c
                for t, c in zip(texts, out, strict=True)]

    def end_sessions(self, sessions):
        self.inner.end_sessions(sessions)


def _explore(tokenizer, world, **options):
    task = family(world.train, "bank_balance")
    teacher = ScriptedTeacher(tokenizer, world.train, reflections=[VALID])
    teacher.engine = PrefillCompleter(teacher.engine)
    target = Target("x", task, "unused", evidence=json.dumps({"tool": "deposit"}), named_tool="deposit")
    (x,) = explore(teacher, make_env, [target], rounds=2, steps=4, seed=0, **options)
    row = exploration_artifacts([x], run="t", round_=1, teacher=teacher.version)["explorations"][0]
    return x, json.loads(row["context"]), teacher.engine


def test_the_context_holds_the_named_tools_schema_and_its_apps_listing(tokenizer, world):
    plain, context, _ = _explore(tokenizer, world)
    assert "named_tools" not in context and "deposit" not in plain.episodes[0].messages[0]["content"]
    x, context, _ = _explore(tokenizer, world, named_tool_context=True)
    assert context["named_tools"] == ["deposit"] and context["listing"] == "list_accounts"
    assert context["named_tool_schema"]["name"] == "deposit"
    assert set(context["named_tool_schema"]["parameters"]["properties"]) == {"account_id", "amount"}
    system = x.episodes[0].messages[0]["content"]
    assert json.dumps(context["named_tool_schema"], sort_keys=True) in system
    assert "First call list_accounts (it takes no arguments)" in system and "then call deposit" in system


def test_the_first_reply_of_each_episode_is_prefilled_with_a_call_of_the_named_tool(tokenizer, world):
    plain, _, _ = _explore(tokenizer, world)
    assert all(ep.steps[0]["tool"] != "deposit" for ep in plain.episodes)
    x, context, engine = _explore(tokenizer, world, prefill_named_tool=True)
    assert context["prefilled_tool"] == "deposit"
    for episode in x.episodes:
        first = next(m for m in episode.messages if m["role"] == "assistant")
        assert first["content"].startswith(call_prefix("deposit"))
        assert episode.steps[0]["kind"] == "call" and episode.steps[0]["tool"] == "deposit"
        later = [m["content"] for m in episode.messages if m["role"] == "assistant"][1:]
        assert not any(text.startswith(call_prefix("deposit")) for text in later)  # only the first reply
    assert sum(p.endswith(call_prefix("deposit")) for p in engine.prompts) == 2  # one per episode


def test_prefilled_arguments_open_the_call_at_the_tools_first_required_parameter(tokenizer, world):
    _, _, engine = _explore(tokenizer, world, prefill_named_tool=True, prefill_arguments=True)
    opened = call_prefix("deposit") + '{"account_id": '
    assert sum(p.endswith(opened) for p in engine.prompts) == 2  # one per episode
    listing = [{"type": "function", "function": {"name": "list_accounts", "parameters": {"properties": {}}}}]
    assert call_prefix("list_accounts", listing) == call_prefix("list_accounts") + "{"


def test_listing_first_prefills_the_listing_then_the_named_tool_with_its_first_value_opened(tokenizer, world):
    _, context, engine = _explore(tokenizer, world, named_tool_context=True, prefill_named_tool=True,
                                  prefill_listing_first=True)
    assert context["listing"] == "list_accounts" and context["prefilled_tool"] == "deposit"
    listing, named = call_prefix("list_accounts"), call_prefix("deposit") + '{"account_id": "'
    assert sum(p.endswith(listing) for p in engine.prompts) == 2  # each episode's first reply
    assert sum(p.endswith(named) for p in engine.prompts) == 2  # and its second


def test_listing_call_makes_the_listings_whole_call_the_first_reply_which_the_teacher_does_not_write(
        tokenizer, world):  # fmt: skip
    options = {"named_tool_context": True, "prefill_named_tool": True, "prefill_listing_first": True}
    x, _, engine = _explore(tokenizer, world, **options, prefill_listing_call=True)
    listing, named = call_prefix("list_accounts"), call_prefix("deposit") + '{"account_id": "'
    assert not any(p.endswith(listing) for p in engine.prompts)  # the engine was not asked to write it
    assert sum(p.endswith(named) for p in engine.prompts) == 2  # the named call still opened, second
    for episode in x.episodes:
        first = next(m for m in episode.messages if m["role"] == "assistant")
        assert first["content"] == '<tool_call>\n{"name": "list_accounts", "arguments": {}}\n</tool_call>'
        assert episode.steps[0]["tool"] == "list_accounts" and episode.steps[0]["ok"]
        assert "SAV" in episode.steps[0]["observation"] or "CHK" in episode.steps[0]["observation"]
    assert x.episodes[0].input_ids.count(engine.inner.end_id) > 0  # the whole reply closed its turn


def test_the_explore_stage_points_unused_signals_at_their_tool(tmp_path, tokenizer):
    """Rollout, signals (`unused` beside boundary, round robin) and explore through the stage runner: the
    unused signals' explorations hold their tool's schema and start by calling it."""
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.bootstrap.stage import BOOTSTRAP
    from coevolve.stages.explore.stage import EXPLORE
    from coevolve.stages.rollout.stage import ROLLOUT
    from coevolve.stages.signals.stage import SIGNALS
    from tests.conftest import fake_context
    from tests.unit.test_evolution_round import config

    cfg = config("signals.kinds=[boundary, unused]", "explore.allotment=round_robin", "explore.max_explorations=4",
                 "explore.named_tool_context=true", "explore.prefill_named_tool=true")
    ctx = fake_context(cfg, tmp_path, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, SIGNALS, EXPLORE):
        run_stage(stage, ctx, 0)
    rows = ctx.store.read(0, "explore", "explorations").to_pylist()
    unused = [x for x in rows if x["kind"] == "unused"]
    assert unused and {x["kind"] for x in rows} == {"boundary", "unused"}  # neither kind starves
    steps = ctx.store.read(0, "explore", "steps").to_pylist()
    for x in unused:
        context = json.loads(x["context"])
        (tool,) = context["named_tools"]
        assert context["named_tool_schema"]["name"] == tool and context["prefilled_tool"] == tool
        firsts = [s for s in steps if s["trajectory_id"] in json.loads(x["trajectory_ids"]) and s["step"] == 0]
        assert firsts and all(s["reply"].startswith(call_prefix(tool)) for s in firsts)
