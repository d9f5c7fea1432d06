"""The whole CoEvolve loop through the OpenEnv-served tool world, against the native tool world's run.

configs/test-tiny.yaml with `evolve.every=1`, two rounds, twice with the same seed and the same named fakes
(tests/conftest.py: the oracle policy engine that solves every other episode; the scripted teacher, here
knowing the native training tasks as the oracle does): once on the native tool world, once with `env.name:
openenv` on the tool world served by OpenEnv's `create_app` on 127.0.0.1 (`envs.openenv.toolworld_server`),
its tasks the native test-tiny tasks written as the adapter's task file. Task ids differ through the adapter
(they hash the reset arguments), so the runs are compared by content: the same tasks drawn with the same
rollout rewards, the same synthesized candidates (query, reference calls, answers, status), and for each
candidate the same verdict of the verify stage (outcome and the kind of its reason), every one decided in the
served run by the served environment's own reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from tests.conftest import CONFIGS, oracle_engines, tiny_train_tasks  # noqa: E402
from tests.fakes.openenv_inventory import served_inventory  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

APP = "coevolve.envs.openenv.toolworld_server:create_toolworld_app"
EVOLUTION = ["signals", "explore", "triples", "abstract", "verify", "merge"]


def write_native_tasks(path: Path) -> Path:
    """The test-tiny tool world's tasks, every split, as rows of the adapter's task file (`task_row`)."""
    from coevolve import envs
    from coevolve.config import load_config
    from coevolve.envs.openenv.toolworld_server import task_row

    cfg = load_config(CONFIGS / "test-tiny.yaml")
    native = envs.make(cfg.env.name, **cfg.env.options)
    rows = [{**task_row(task), "split": split} for split in native.splits() for task in native.tasks(split)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


SAME = ["evolve.every=1", "rollout.max_replies=8"]
"""Both runs' overrides of test-tiny.yaml: evolution every round, and room for every turn of an episode to be
answered (test-tiny's 3 replies cut some multi-turn episodes short; a served environment never sees the
agent's replies, so it cannot tell an unanswered turn from an answered one: docs/openenv.md)."""


def native_teachers(ctx, policy_round: int):
    """The scripted teacher (tests/fakes/teacher.py) knowing the native test-tiny training tasks, as the oracle
    engines do (a task file holds reference calls of one-turn tasks only), in both runs."""
    from tests.fakes.teacher import ScriptedTeacher

    return ScriptedTeacher(ctx.use_policy(policy_round).tokenizer, tiny_train_tasks())


def run_tiny(root: Path, overrides: list[str]) -> dict:
    """test-tiny.yaml with `SAME` and `overrides`, two rounds, through the real round loop with the named fakes
    of `tests.conftest.run_evolved`."""
    from prefect import flow

    from coevolve.config import load_config
    from coevolve.flows.coevolve import run_context
    from coevolve.flows.run_context import open_run

    @flow(name="coevolve-toolworld-with-fakes")
    def evolve(root: str) -> dict:
        cfg = load_config(CONFIGS / "test-tiny.yaml", SAME + overrides)
        ctx = open_run(cfg, "evo", Path(root), engine_factory=oracle_engines(), teacher_factory=native_teachers)
        return run_context(ctx, rounds=2)

    return evolve(str(root))


def candidates_of(root: Path) -> dict[tuple, str]:
    """Each round's synthesized candidates by content (round, query, reference calls, answers) -> status."""
    from coevolve.storage.catalog import query

    rows = query(root, "SELECT round, query, solution, answers, status FROM candidates").to_pylist()
    return {(r["round"], r["query"], r["solution"], r["answers"]): r["status"] for r in rows}


def verdicts_of(root: Path) -> dict[tuple, tuple[str, str]]:
    """The verify stage's verdict on each candidate, by its content: (outcome, the reason's kind)."""
    from coevolve.storage.catalog import query

    rows = query(root, "SELECT c.round, c.query, c.solution, c.answers, v.outcome, v.reason FROM verifications v "
                       "JOIN candidates c USING (candidate_id)").to_pylist()  # fmt: skip
    return {(r["round"], r["query"], r["solution"], r["answers"]): (r["outcome"], r["reason"].split(":")[0])
            for r in rows}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prefect_api):
    """(native run root, served run root, the served run's result)."""
    root = tmp_path_factory.mktemp("served-toolworld")
    run_tiny(root / "native", [])
    with served_inventory(APP) as url:
        options = json.dumps({"url": url, "tasks": str(write_native_tasks(root / "tasks.jsonl"))})
        result = run_tiny(root / "served", ["env.name=openenv", f"env.options={options}"])
    return root / "native", root / "served", result


def test_the_loop_runs_through_the_served_tool_world(runs):
    from coevolve.storage.catalog import query

    _, root, result = runs
    for stages_of_round in result["rounds"]:
        assert [s for s in stages_of_round if s in EVOLUTION] == EVOLUTION
    admitted = query(root, "SELECT count(*) AS n FROM tasks WHERE source = 'synthesized'").to_pylist()[0]["n"]
    assert admitted >= 1
    checkers = query(root, "SELECT checker FROM verifications WHERE outcome != 'discard'").to_pylist()
    for row in checkers:  # every admitted candidate was verified by the served environment's own reward
        checker = json.loads(row["checker"])
        assert checker["reference_reward"] >= 0.5 > checker["idle_reward"]


def test_the_served_run_gives_the_native_run_s_data_and_verdicts(runs):
    from coevolve.storage.catalog import query

    native_root, root, _ = runs
    rewards = ("SELECT t.round, k.turns, t.reward FROM trajectories t JOIN tasks k USING (task_id) "
               "WHERE t.source = 'rollout' ORDER BY ALL")  # the same tasks drawn, the same rewards
    assert query(root, rewards).to_pylist() == query(native_root, rewards).to_pylist()
    assert candidates_of(root) == candidates_of(native_root)
    served, native = verdicts_of(root), verdicts_of(native_root)
    assert served == native and native
