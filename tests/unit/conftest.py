"""Fixtures of the evolution-phase tests, on the small tool world of `evolution_world`: the world's
splits, a scripted exploration of five training tasks and a broken one (`explored`), and a verification
of hand-made candidates covering every outcome (`verified`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coevolve.llm.chat import ChatFormat
from coevolve.stages.explore.exploration import Target, exploration_artifacts, explore
from coevolve.stages.verify.candidates import candidate_task
from coevolve.stages.verify.verification import VerifySettings, verify_candidates
from tests.fakes.teacher import OracleEngine, ScriptedTeacher
from tests.unit.evolution_world import VALID, candidate, family, make_env


@pytest.fixture(scope="module")
def world():
    env = make_env()
    return SimpleNamespace(train=env.tasks("train"), test=env.tasks("test"))


@pytest.fixture(scope="module")
def explored(tokenizer, world):
    tasks = [
        family(world.train, f)
        for f in ("bank_balance", "send_message", "balance_then_transfer", "file_lookup", "write_note")
    ]
    broken = tasks[0].model_copy(update={"id": "broken", "turns": []})
    targets = [Target(f"x{i}", t, "boundary", f"s{i}", f"t{i}") for i, t in enumerate([*tasks, broken])]
    teacher = ScriptedTeacher(
        tokenizer,
        world.train,
        reflections=[
            VALID,
            VALID,
            VALID,
            "I think the agent should try harder.",
            '{"tools": ["get_balance"]}',
        ],
    )
    explorations = explore(teacher, make_env, targets, rounds=2, steps=6, seed=0)
    artifacts = exploration_artifacts(explorations, run="t", round_=3, teacher=teacher.version)
    return SimpleNamespace(targets=targets, explorations=explorations, artifacts=artifacts, teacher=teacher)


@pytest.fixture(scope="module")
def verified(tokenizer, world):
    """Hand-made candidates verified under `verify.judge: policy` (the policy's attempts decide)."""
    return verify_hand_made(tokenizer, world, "policy")


@pytest.fixture(scope="module")
def executed(tokenizer, world):
    """The same candidates verified under `verify.judge: execution` (the task's execution decides)."""
    return verify_hand_made(tokenizer, world, "execution")


def verify_hand_made(tokenizer, world, judge: str) -> SimpleNamespace:
    bank, messages = family(world.train, "bank_balance"), family(world.train, "send_message")
    (acc_a, a), (acc_b, b) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    contact = next(iter(messages.initial_state["messages"]["contacts"]))
    held = family(world.test, "send_message")
    rows = [
        candidate(
            bank,
            f"What is the balance of {acc_a}?",
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [f"{a['balance']:.2f}"],
            "accept",
        ),
        candidate(
            bank,
            f"Move 5 from {acc_a} to {acc_b}, then tell me the new balance of {acc_b}.",  # the fake policy
            [{"name": "transfer", "arguments": {"from_account": acc_a, "to_account": acc_b, "amount": 5}},
             {"name": "get_balance", "arguments": {"account_id": acc_b}}],  # moves it, states no balance
            [f"{b['balance'] + 5:.2f}"],
            "retain",
        ),
        candidate(
            bank,
            f"How much is in {acc_b}?",  # the fake policy reads the balance but does not state it
            [{"name": "get_balance", "arguments": {"account_id": acc_b}}],
            [f"{b['balance']:.2f}"],
            "called",
        ),
        candidate(
            bank,
            f"Tell me the balance of {acc_b}.",  # the fake policy gives up: what an idle answer earns
            [{"name": "get_balance", "arguments": {"account_id": acc_b}}],
            [f"{b['balance']:.2f}"],
            "idle",
        ),
        candidate(
            messages,
            f"Text {contact}: 'see you at noon'",
            [{"name": "send_message", "arguments": {"to": contact, "text": "see you at noon"}}],
            [],
            "zero",
        ),
        candidate(
            bank,
            f"Read {acc_a}.",  # no answer named: the balance it reads becomes the answer
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [],
            "read",
        ),
        candidate(
            bank,
            "Show me my accounts.",
            [{"name": "list_accounts", "arguments": {}}],
            [],
            "noeffect",
        ),
        candidate(
            bank,
            f"Transfer 125.39 from {acc_a} to {acc_b}.",  # a small teacher's mismatched pair
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [],
            "instruction",
        ),
        candidate(
            bank,
            f"Move 5 from {acc_a} to {acc_b}.",  # the same with the balance it reads named as the answer
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [str(a["balance"])],
            "named",
        ),
        candidate(
            bank,
            f"Move 5 from {acc_a} to {acc_b} and tell me the balance of {acc_a}.",  # asks, and for an action
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [str(a["balance"])],
            "action",
        ),
        candidate(
            bank,
            f"What is the balance of {acc_a} once 125.39 went to {acc_b}?",  # asks, but not what it reads
            [{"name": "get_balance", "arguments": {"account_id": acc_a}}],
            [],
            "ungrounded",
        ),
        candidate(
            messages,
            f"Thank {contact}.",
            [{"name": "send_message", "arguments": {"to": contact, "text": "Thanks a lot"}}],
            [],
            "unsolvable",
        ),
        candidate(bank, "Teleport me.", [{"name": "teleport", "arguments": {}}], [], "badcall"),
        candidate(
            held, held.turns[0] + " Please.", [c.model_dump() for c in held.solution[0]], [], "contaminated"
        ),
        candidate(bank, "ignored", [], [], "unparsable", status="unparsable"),
    ]
    known, half_known = candidate_task(make_env(), rows[0]), [candidate_task(make_env(), {**r, "answers": "[]"})
                                                           for r in rows[1:3]]
    policy = SimpleNamespace(engine=OracleEngine(tokenizer, [known, *half_known]), version="policy-v1")
    policy.chat = ChatFormat(tokenizer)
    lineage = {"x-signal": {"signal_id": "sig-1", "trajectory_id": "traj-1", "signal_kind": "boundary"}}
    out = verify_candidates(
        policy, make_env, rows, world.test, lineage, VerifySettings(attempts=2, judge=judge), run="t", round_=3
    )
    return SimpleNamespace(
        rows=rows,
        out=out,
        by_candidate={v["candidate_id"]: v for v in out["verifications"]},
        accounts=(acc_a, acc_b),
        balance_a=a["balance"],
    )
