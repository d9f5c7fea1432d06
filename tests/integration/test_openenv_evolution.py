"""The whole CoEvolve loop on an OpenEnv environment: configs/openenv-tiny.yaml with `evolve.every=1` through
the real flow (rollouts, GRPO, signals, explore, triples, abstract, verify, merge) on the stock room in
process, with the named fakes of tests/integration/test_evolution_tiny.py (an oracle policy engine that
solves every other episode, the scripted teacher). Every verdict on a synthesized candidate is the
environment's own: an admitted task's checker records the reward its reference calls earned (1.0) and
the reward of doing nothing (0.0); a discarded one names its reason."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from tests.conftest import CONFIGS  # noqa: E402
from tests.fakes.openenv_inventory import write_task_file  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EVOLUTION = ["signals", "explore", "triples", "abstract", "verify", "merge"]


def stock_room_abstraction(prompt: str) -> str:
    """A teacher's abstraction for the stock room: the explored calls that change the stock, worded as the
    instruction to make them ("Add 3 units of washer to the stock room.")."""
    observed = re.search(r"OBSERVED CALLS \(JSON\):\n(.*)\n", prompt)
    calls = json.loads(observed.group(1)) if observed else []
    changes = [i for i, c in enumerate(calls) if c["tool"] in ("add_stock", "remove_stock")]
    if not changes:
        return "[]"
    words = [f"{'Add' if calls[i]['tool'] == 'add_stock' else 'Remove'} {calls[i]['arguments']['quantity']} units "
             f"of {calls[i]['arguments']['item']}" for i in changes]  # fmt: skip
    query = " and then ".join(words) + " in the stock room."
    return json.dumps([{"intent": "change the stock", "query": query, "solution": changes, "answers": []}])


def stock_room_teachers(ctx, policy_round: int):
    """The scripted teacher (tests/fakes/teacher.py) with the stock room's abstraction."""
    from tests.fakes.teacher import ScriptedTeacher

    return ScriptedTeacher(ctx.use_policy(policy_round).tokenizer, ctx.env_tasks("train"),
                           abstractions=stock_room_abstraction)  # fmt: skip


def run_openenv_evolved(root: Path, task_file: Path) -> dict:
    from prefect import flow

    from coevolve.config import load_config
    from coevolve.flows.coevolve import run_context
    from coevolve.flows.run_context import open_run
    from tests.fakes.teacher import OracleEngine

    @flow(name="coevolve-openenv-with-fakes")
    def evolve(root: str) -> dict:
        cfg = load_config(CONFIGS / "openenv-tiny.yaml", ["evolve.every=1", f"env.options.tasks={task_file}"])
        train = open_run(cfg, "openenv", Path(root)).env_tasks("train")

        def engines(policy):
            return OracleEngine(policy.tokenizer, train, solve="alternate", explore_unknown=True,
                                version=policy.version)  # fmt: skip

        ctx = open_run(cfg, "openenv", Path(root), engine_factory=engines, teacher_factory=stock_room_teachers)
        return run_context(ctx, rounds=2)

    return evolve(str(root))


def test_the_loop_runs_on_an_openenv_environment_and_it_verifies_the_candidates(tmp_path, prefect_api):
    from coevolve.storage.catalog import query

    result = run_openenv_evolved(tmp_path / "runs", write_task_file(tmp_path / "tasks.jsonl"))
    for stages_of_round in result["rounds"]:
        assert [s for s in stages_of_round if s in EVOLUTION] == EVOLUTION
    root = tmp_path / "runs"
    rewards = query(root, "SELECT reward FROM trajectories WHERE source = 'rollout'").to_pylist()
    assert {r["reward"] for r in rewards} == {0.0, 1.0}  # the oracle solves every other episode
    verdicts = query(root, "SELECT outcome, reason, checker FROM verifications").to_pylist()
    assert verdicts
    for row in verdicts:
        if row["outcome"] == "discard":
            assert row["reason"]
        else:
            checker = json.loads(row["checker"])
            assert (checker["reference_reward"], checker["idle_reward"]) == (1.0, 0.0)
    kept = sum(row["outcome"] != "discard" for row in verdicts)
    admitted = query(root, "SELECT count(*) AS n FROM tasks WHERE source = 'synthesized'").to_pylist()[0]["n"]
    assert kept >= 1 and admitted >= 1  # the environment's own verify admitted synthesized tasks
