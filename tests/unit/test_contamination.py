"""The contamination guard (`stages.verify.contamination`): a synthesized task that checks what a held-out task
checks (its answers in its world, or its final state) is refused by verification and by the
no-verification ablation alike, whatever its wording."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from coevolve.stages.verify.candidates import Rejected
from coevolve.stages.verify.checks import checks_nothing_held_out
from coevolve.stages.verify.contamination import HeldOut, required_answers, world_of
from coevolve.stages.verify.settings import VerifySettings
from coevolve.stages.verify.verification import verify_candidates
from tests.unit.evolution_world import candidate, family, make_env
from tests.unit.test_checks import draft_before


@pytest.fixture(scope="module")
def bank(world):
    task = family(world.train, "bank_balance")
    (a, info_a), (b, _) = list(task.initial_state["bank"]["accounts"].items())[:2]
    return SimpleNamespace(
        task=task, a=a, b=b, balance_a=f"{info_a['balance']:.2f}",
        read=[{"name": "get_balance", "arguments": {"account_id": a}}],
        transfer=[{"name": "transfer", "arguments": {"from_account": a, "to_account": b, "amount": 5.0}}],
    )  # fmt: skip


def test_the_answers_of_a_held_out_task_in_its_world_are_refused_in_other_words(bank):
    row = candidate(bank.task, f"How much money is in {bank.a}? Tell me.", bank.read, [bank.balance_a], "reworded")
    ctx, d = draft_before(checks_nothing_held_out, row)
    held = HeldOut(answers={(world_of(d.task), required_answers(d.task)): "held-1"})
    ctx, d = draft_before(checks_nothing_held_out, row, held)
    with pytest.raises(Rejected, match=r"^contamination: checks what held-out task held-1 checks \(the same answers"):
        checks_nothing_held_out(ctx, d)
    elsewhere = HeldOut(answers={("another world", required_answers(d.task)): "held-2"})
    ctx, d = draft_before(checks_nothing_held_out, row, elsewhere)
    checks_nothing_held_out(ctx, d)  # the same value in another world is another task


def test_the_final_state_of_a_held_out_solution_is_refused_and_a_read_is_not_a_state(bank):
    row = candidate(bank.task, f"Send 5 from {bank.a} to {bank.b}.", bank.transfer, [], "moved")
    ctx, d = draft_before(checks_nothing_held_out, row)
    assert not d.read_only
    ctx, d = draft_before(checks_nothing_held_out, row, HeldOut(outcomes={d.after: "held-3"}))
    with pytest.raises(Rejected, match=r"^contamination: .*held-3 checks \(its solution ends in the same state\)"):
        checks_nothing_held_out(ctx, d)
    read = candidate(bank.task, f"What is the balance of {bank.a}?", bank.read, [], "read")
    ctx, r = draft_before(checks_nothing_held_out, read)
    assert r.read_only and HeldOut(outcomes={r.after: "x"}).same_check(r.task, after=r.after, read_only=True) is None


def test_the_index_replays_held_out_solutions_for_their_final_state(world):
    held_out = [t for t in world.test if t.solution]
    index = HeldOut.of(held_out, make_env)
    assert index.outcomes and set(index.outcomes.values()) <= {t.id for t in held_out}
    assert len(index.queries) == len(held_out) and set(index.signatures.values()) <= {t.id for t in held_out}
    assert HeldOut.of(held_out).outcomes == {}  # without an environment: text and answers only


def test_the_no_verification_ablation_refuses_a_held_out_task_too(bank):
    twin = candidate(bank.task, f"Send 5 from {bank.a} to {bank.b}.", bank.transfer, [], "twin")
    other = candidate(bank.task, f"What is the balance of {bank.a}?", bank.read, [bank.balance_a], "other")
    ctx, d = draft_before(checks_nothing_held_out, twin)
    held = d.task.model_copy(update={"id": "held-4", "turns": ["Please move five from one account to another."]})
    rows = verify_candidates(SimpleNamespace(version="p0"), make_env, [twin, other], [held], {},
                             VerifySettings(verify=False), run="r", round_=0)["verifications"]  # fmt: skip
    by_candidate = {row["candidate_id"]: row for row in rows}
    assert by_candidate["twin"]["outcome"] == "discard"
    assert by_candidate["twin"]["reason"].startswith("contamination: near-duplicate of held-out task held-4")
    assert by_candidate["other"]["outcome"] == "accept"
