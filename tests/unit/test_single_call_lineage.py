"""The lineage of a task abstracted from one call of a group (`abstract.single_calls`): its candidate
names a one-call group that no triple carries, so the task records the group the call came from and the
call's position there (`parent_group_id`, `call_index`), and the web view's task page shows that group's
triples with the call marked. Walked through real stages with fake models (`fake_context`), then through
the task page."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient

from coevolve.config import load_config
from coevolve.envs.base import Task
from coevolve.pipeline.runner import run_stage
from coevolve.stages.bootstrap.stage import BOOTSTRAP
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.round_plan import EVOLUTION
from coevolve.ui.app import create_app
from coevolve.ui.lineage import lineage_chain, task_page
from coevolve.ui.reader import RunsReader
from tests.conftest import CONFIGS, fake_context


@pytest.fixture(scope="module")
def evolved(tmp_path_factory, tokenizer):
    """One evolving round with `abstract.single_calls`; the tasks admitted from one-call groups."""
    root = tmp_path_factory.mktemp("single-calls")
    cfg = load_config(CONFIGS / "test-tiny.yaml",
                      ["evolve.every=1", "explore.rounds=1", "abstract.single_calls=true"])  # fmt: skip
    ctx = fake_context(cfg, root, tokenizer)
    for stage in (BOOTSTRAP, ROLLOUT, *EVOLUTION):
        run_stage(stage, ctx, 0)
    triples = ctx.store.read(0, "triples", "triples").to_pylist()
    candidates = {c["candidate_id"]: c for c in ctx.store.read(0, "abstract", "candidates").to_pylist()}
    groups = {t["group_id"] for t in triples}
    tasks = ctx.store.read(0, "merge", "tasks").to_pylist()
    admitted = [Task.from_row(r) for r in tasks if r["source"] == "synthesized"]
    single = [t for t in admitted if candidates[t.lineage["candidate_id"]]["group_id"] not in groups]
    assert single, "no admitted task came from a one-call group"
    return SimpleNamespace(root=root, run=ctx.run, triples=triples, single=single)


def test_a_task_from_a_single_call_group_walks_back_to_its_signal(evolved):
    reader = RunsReader(evolved.root)
    for task in evolved.single:
        lineage = task.lineage
        chain = task_page(reader, evolved.run, task.id)["chain"]
        # signal -> exploration -> triples -> candidate -> verification -> task, each link found by id
        assert chain["signal"]["signal_id"] == lineage["signal_id"]
        exploration = chain["exploration"]
        assert exploration["exploration_id"] == lineage["exploration_id"]
        assert exploration["signal_id"] == lineage["signal_id"]
        assert chain["triples"], f"the task page finds no triple of group {lineage['group_id']}"
        parent, index = lineage["parent_group_id"], lineage["call_index"]
        assert {t["group_id"] for t in chain["triples"]} == {parent}
        assert {t["exploration_id"] for t in evolved.triples if t["group_id"] == parent} == {exploration["exploration_id"]}
        candidate = chain["candidate"]
        assert candidate["candidate_id"] == lineage["candidate_id"] and candidate["group_id"] == lineage["group_id"]
        # the candidate's one solution call is call `call_index` of the group, and the page marks it
        (call,) = json.loads(candidate["solution"])
        marked = {(t["tool"], t["arguments"]) for t in chain["triples"] if t["abstracted"]}
        assert [(tool, json.loads(arguments)) for tool, arguments in marked] == [(call["name"], call["arguments"])]
        distinct = list(dict.fromkeys((t["tool"], t["arguments"]) for t in chain["triples"] if t["ok"]))
        assert distinct[int(index)] in marked
        verification = chain["verification"]
        assert verification["verification_id"] == lineage["verification_id"]
        assert verification["candidate_id"] == candidate["candidate_id"]
        assert verification["task_id"] == task.id and verification["outcome"] in ("accept", "retain")


def test_the_task_page_shows_the_parent_groups_triples(evolved):
    task = evolved.single[0]
    client = TestClient(create_app(evolved.root), base_url="http://127.0.0.1")
    page = client.get(f"/runs/{evolved.run}/tasks/{task.id}").text
    triples = page.split('id="link-triples"')[1].split('id="link-candidate"')[0]
    assert task.lineage["parent_group_id"] in triples and '<tr class="abstracted">' in triples
    assert ">none<" not in triples


def test_a_run_without_parent_ids_finds_the_triples_through_the_exploration(evolved):
    """A lineage written before one-call groups named their parent: a hashed group id only."""
    task = evolved.single[0]
    old = {k: v for k, v in task.lineage.items() if k not in ("parent_group_id", "call_index")}
    old["group_id"] = "1e3d6173a883eac1"
    rows = lineage_chain(RunsReader(evolved.root), evolved.run, old)["triples"]
    assert rows and {r["group_id"] for r in rows} == {task.lineage["parent_group_id"]}
