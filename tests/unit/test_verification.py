"""Verification (step 6): the policy's attempts and the paper's accept / retain / discard rule over hand-made
candidates (the `verified` fixture), sibling wordings standing in, the admitted task, the no-verification
ablation. The environment checks one by one are in test_checks.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from coevolve.envs.base import Task
from coevolve.envs.replay import replay_reference
from coevolve.llm.chat import ChatFormat
from coevolve.stages.verify.candidates import candidate_task
from coevolve.stages.verify.verification import VerifySettings, verify_candidates
from tests.fakes.teacher import OracleEngine
from tests.unit.evolution_world import candidate, family, make_env


def test_a_discarded_candidate_hands_over_to_its_sibling_duplicates(tokenizer, world):
    """The first wording of a solution is discarded (an instruction over a read): the next duplicate of
    it is checked in its place and stands for the solution; later ones and duplicates of a dataset task
    are left alone; a solution whose every wording fails leaves a discard row per wording."""
    bank = family(world.train, "bank_balance")
    (acc_a, a), (acc_b, _) = list(bank.initial_state["bank"]["accounts"].items())[:2]
    read = [{"name": "get_balance", "arguments": {"account_id": acc_a}}]
    listing = [{"name": "list_accounts", "arguments": {}}]

    def duplicate(query: str, calls: list[dict], cid: str, of: str) -> dict:
        return {**candidate(bank, query, calls, [], cid, status="duplicate"), "duplicate_of": of}

    rows = [
        candidate(bank, f"Transfer 125.39 from {acc_a} to {acc_b}.", read, [], "mismatched"),
        candidate(bank, f"Transfer 9 from {acc_a} to {acc_b}.", listing, [], "listing"),
        duplicate(f"What is the balance of {acc_a}?", read, "sibling", "mismatched"),
        duplicate(f"Show me the balance of {acc_a}.", read, "later", "mismatched"),
        duplicate(f"Send 9 from {acc_b} to {acc_a}.", listing, "also-mismatched", "listing"),
        duplicate(f"Send 9 from {acc_b} to {acc_a}.", listing, "also-mismatched", "listing"),  # another reply's
        duplicate(f"Balance of {acc_a}?", read, "of-dataset", bank.id),
    ]
    known = candidate_task(make_env(), {**rows[2], "answers": json.dumps([f"{a['balance']:.2f}"])})
    policy = SimpleNamespace(engine=OracleEngine(tokenizer, [known]), version="p", chat=ChatFormat(tokenizer))
    out = verify_candidates(policy, make_env, rows, [], {}, VerifySettings(attempts=1), run="t", round_=0)
    verdicts = {v["candidate_id"]: v for v in out["verifications"]}
    assert len(verdicts) == len(out["verifications"])  # each wording checked once
    assert {cid: v["outcome"] for cid, v in verdicts.items()} == {
        "mismatched": "discard", "sibling": "accept", "listing": "discard", "also-mismatched": "discard"}  # fmt: skip
    assert all(verdicts[cid]["reason"].startswith("no effect") for cid in ("mismatched", "listing", "also-mismatched"))
    assert [t["task_id"] for t in out["trajectories"]] == [known.id]  # one policy attempt, for the stand-in


def test_verify_outcomes(verified):
    v = verified.by_candidate
    assert set(v) == {
        "accept", "retain", "called", "idle", "zero", "read", "noeffect", "instruction", "named", "action",
        "ungrounded", "unsolvable", "badcall", "contaminated",
    }  # fmt: skip
    assert (v["accept"]["outcome"], v["accept"]["reward"], v["accept"]["success"]) == ("accept", 1.0, True)
    # part of the task done (the transfer, not the balance asked for): retained
    assert v["retain"]["outcome"] == "retain" and 0 < v["retain"]["reward"] < 0.5
    assert v["retain"]["reason"].startswith("the policy failed having done part of the task: progress 0.50 above "
                                            "an idle answer's 0.00")  # fmt: skip
    # a call that ran and parsed earns shaping credit, and giving up the shaped reward's floor: neither
    # is any more of the task done than by an idle answer, so neither is retained
    assert (v["called"]["outcome"], v["idle"]["outcome"]) == ("discard", "discard")
    assert v["called"]["reward"] > v["idle"]["reward"] == pytest.approx(0.175)
    assert v["idle"]["reason"] == ("the policy failed doing no more of the task than an idle answer: progress "
                                   "0.50, idle 0.50 (best of 2; reward 0.17)")  # fmt: skip
    assert (v["zero"]["outcome"], v["zero"]["reward"]) == ("discard", 0.0)
    assert v["zero"]["reason"] == "the policy failed with zero reward (2 attempts)"
    assert v["noeffect"]["reason"].startswith("no effect") and "new values (at most 3" in v["noeffect"]["reason"]
    for name in ("instruction", "named"):
        assert v[name]["reason"].startswith("no effect") and "asks neither a question" in v[name]["reason"]
    assert v["action"]["reason"].startswith("no effect: the solution changes nothing, but the query asks for "
                                            "an action ('Move'")  # fmt: skip
    assert v["ungrounded"]["reason"] == (
        f"ungrounded: the query names 125.39, {verified.accounts[1]}, which the solution neither uses nor "
        "reads (1 of 3 literals grounded)"
    )
    assert v["unsolvable"]["reason"].startswith("unsolvable: argument Thanks a lot of send_message")
    assert v["badcall"]["reason"].startswith("replay: reference call teleport() failed")
    assert v["contaminated"]["reason"].startswith("contamination: near-duplicate of held-out task")
    for name in ("noeffect", "instruction", "named", "action", "ungrounded", "unsolvable", "badcall",
                 "contaminated"):  # fmt: skip
        assert v[name]["outcome"] == "discard" and v[name]["attempts"] == 0 and v[name]["task"] is None


def test_execution_judges_by_the_task_not_by_the_policy(executed, verified):
    """`verify.judge: execution`: every candidate whose reference solution passes the checks is accepted,
    those the fake policy fails included (the policy-veto rule discards or retains them); the policy's
    attempts are still made, recorded and reported; every check still discards what it discarded."""
    e, p = executed.by_candidate, verified.by_candidate
    attempted = ("accept", "retain", "called", "idle", "zero", "read")
    assert {name: e[name]["outcome"] for name in attempted} == dict.fromkeys(attempted, "accept")
    assert [p[name]["outcome"] for name in attempted] == ["accept", "retain", "discard", "discard", "discard",
                                                           "discard"]  # fmt: skip
    assert e["zero"]["reason"] == ("executed: the reference solution satisfies the checker; the policy solved "
                                   "0/2 attempts (best progress 0.00)")  # fmt: skip
    assert (e["zero"]["attempts"], e["zero"]["success"], e["accept"]["success"]) == (2, False, True)
    assert len(executed.out["trajectories"]) == len(verified.out["trajectories"]) == 6 * 2
    for name in set(e) - set(attempted):
        assert (e[name]["outcome"], e[name]["reason"]) == ("discard", p[name]["reason"])


def test_a_read_only_candidate_without_answers_asks_for_what_its_solution_reads(verified):
    row = verified.by_candidate["read"]
    assert json.loads(row["checker"])["answers"] == [[str(verified.balance_a)]]  # not the account it names
    assert (row["outcome"], row["attempts"]) == ("discard", 2)  # the fake policy does not know it: gives up
    assert row["reason"].endswith(f"answers read from the solution's last result: {verified.balance_a}")


def test_verify_admits_a_task_with_checker_lineage_and_attempt_trajectories(verified, world):
    row = verified.by_candidate["accept"]
    task = json.loads(row["task"])
    checker = json.loads(row["checker"])
    assert (
        row["task_id"] == task["task_id"]
        and task["source"] == "synthesized"
        and task["split"] == "synthesized"
    )
    assert set(checker) == {"final_state", "answers"}
    assert checker["answers"] == [json.loads(verified.rows[0]["answers"])]
    assert json.loads(task["lineage"]) == {
        "signal_id": "sig-1",
        "trajectory_id": "traj-1",
        "signal_kind": "boundary",
        "exploration_id": "x-signal",
        "group_id": "g-accept",
        "candidate_id": "accept",
        "verification_id": row["verification_id"],
    }
    assert row["expected_digest"]
    trajectories = verified.out["trajectories"]
    assert {t["source"] for t in trajectories} == {"verify"} and len(
        trajectories
    ) == 6 * 2  # 6 attempted, K=2
    # the admitted task is scored by its verifiable checker like any task
    synthesized = Task.from_row({**task})
    assert replay_reference(make_env(), synthesized).success
    env = make_env()
    env.reset(synthesized)
    env.step("I have no idea.")
    assert not env.evaluate().success


def test_no_verification_ablation_admits_every_parsed_candidate(verified, tokenizer):
    policy = SimpleNamespace(engine=None, chat=ChatFormat(tokenizer), version="policy-v1")
    out = verify_candidates(
        policy, make_env, verified.rows, [], {}, VerifySettings(verify=False), run="t", round_=3
    )
    by_candidate = {v["candidate_id"]: v for v in out["verifications"]}
    ok = {r["candidate_id"] for r in verified.rows if r["status"] == "ok"}
    assert set(by_candidate) == ok and out["trajectories"] == []
    assert all(v["outcome"] == "accept" and v["attempts"] == 0 for v in by_candidate.values())
    assert all(v["reason"].startswith("admitted without verification") for v in by_candidate.values())
    # tasks verification would have thrown out, e.g. one whose solution fails, now enter the dataset
    assert json.loads(by_candidate["badcall"]["task"])["source"] == "synthesized"
    assert json.loads(by_candidate["contaminated"]["task"])
