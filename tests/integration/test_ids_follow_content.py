"""Ids follow content: a stage re-run that changes an episode gives it a new id, so every admitted task's
lineage (task -> candidate -> triples -> exploration -> signal -> trajectory) names the episodes it was made
from, or its stage is reported stale, never the new, different episodes; an identical re-run keeps every id.

Round 0 of test-tiny.yaml with `evolve.every=1`, through the stage runner, with the fakes of the evolution
tests (tests/integration/test_evolution_tiny.py) except that the policy's oracle engine stops at
`max_new_tokens` as a real engine does; then round 0's rollout again with `rollout.max_new_tokens=8`, which
cuts every tool call short (the issue: a successful trajectory behind a signal became a parse error under
its old id).
"""

from __future__ import annotations

import pytest

from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.llm.engine import Completion
from coevolve.pipeline.runner import run_stage
from coevolve.stages.rollout.stage import ROLLOUT
from coevolve.stages.round_plan import round_plan
from coevolve.storage.staleness import stale_stages
from coevolve.ui.lineage import task_page
from coevolve.ui.reader import RunsReader
from tests.conftest import CONFIGS, tiny_train_tasks
from tests.fakes.teacher import OracleEngine, ScriptedTeacher

RUN = "ids"


class CutOracle(OracleEngine):
    """The oracle engine, cut at `max_new_tokens` as a real engine is (finish reason "length")."""

    def generate(self, prompts, sampling, *, progress=None, sessions=None) -> list[Completion]:
        out = []
        for c in super().generate(prompts, sampling, progress=progress, sessions=sessions):
            n = sampling.max_new_tokens
            if len(c.token_ids) > n:
                text = self.tokenizer.decode(c.token_ids[:n], skip_special_tokens=False)
                c = Completion(c.token_ids[:n], c.logprobs[:n], text, "length")
            out.append(c)
        return out


def context(root, tokenizer, max_new_tokens: int):
    cfg = load_config(CONFIGS / "test-tiny.yaml", ["evolve.every=1", "explore.rounds=1",
                                                   f"rollout.max_new_tokens={max_new_tokens}"])  # fmt: skip
    train = tiny_train_tasks()
    return open_run(
        cfg, RUN, root, quiet=True,
        engine_factory=lambda policy: CutOracle(policy.tokenizer, train, solve="alternate", explore_unknown=True,
                                                version=policy.version),
        teacher_factory=lambda ctx, policy_round: ScriptedTeacher(tokenizer, train),
    )  # fmt: skip


def episodes(root) -> dict[str, str]:
    """trajectory id -> its messages, every trajectory of the run."""
    reader = RunsReader(root)
    return {r["trajectory_id"]: r["messages"]
            for r in reader.rows("SELECT trajectory_id, messages FROM trajectories WHERE run = ?", [RUN])}  # fmt: skip


def rollouts(root) -> dict[tuple[str, int], str]:
    """(task id, sample) -> the messages of round 0's rollout episode."""
    rows = RunsReader(root).rows("SELECT task_id, sample, messages FROM trajectories WHERE run = ? AND round = 0 "
                                 "AND stage = 'rollout'", [RUN])  # fmt: skip
    return {(r["task_id"], r["sample"]): r["messages"] for r in rows}


def lineages(root) -> dict[str, dict]:
    """admitted task id -> the trajectory ids its lineage names, read as the task page reads them."""
    reader = RunsReader(root)
    admitted = reader.rows("SELECT DISTINCT task_id FROM tasks WHERE run = ? AND source = 'synthesized'", [RUN])
    walked = {}
    for row in admitted:
        page = task_page(reader, RUN, row["task_id"])
        chain, lineage = page["chain"], page["lineage"]
        signal, exploration, candidate = chain["signal"], chain["exploration"], chain["candidate"]
        assert candidate["candidate_id"] == lineage["candidate_id"] and chain["triples"]
        assert {t["exploration_id"] for t in chain["triples"]} == {exploration["exploration_id"]}
        assert exploration["signal_id"] == signal["signal_id"] == lineage["signal_id"]
        assert exploration["trajectory_id"] == signal["trajectory_id"]
        walked[row["task_id"]] = {
            "signal": signal["trajectory_id"],
            "explored": set(exploration["episodes"]) | {t["trajectory_id"] for t in chain["triples"]},
            "resolved": chain["signal_trajectory"],
        }
    return walked


@pytest.mark.slow
def test_a_rerun_that_changes_episodes_gives_them_new_ids_and_every_lineage_keeps_its_own(tmp_path, tokenizer):
    ctx = context(tmp_path, tokenizer, max_new_tokens=64)  # the oracle's calls are 35-40 tokens: none is cut
    for stage in round_plan(ctx.config, 0):
        run_stage(stage, ctx, 0)
    before, rolled, walked = episodes(tmp_path), rollouts(tmp_path), lineages(tmp_path)
    assert walked, "the round admitted no task: nothing to walk"
    assert all(w["resolved"]["trajectory"]["trajectory_id"] == w["signal"] for w in walked.values())

    # the same episodes again: the same ids, the same rows, nothing stale
    again = run_stage(ROLLOUT, context(tmp_path, tokenizer, max_new_tokens=64), 0, force=True)
    assert not again.cached and episodes(tmp_path) == before
    assert stale_stages(tmp_path / f"run={RUN}") == []

    run_stage(ROLLOUT, context(tmp_path, tokenizer, max_new_tokens=8), 0)
    after, changed = episodes(tmp_path), rollouts(tmp_path)
    assert rolled.keys() == changed.keys() and rolled != changed, "the re-run changed no episode: nothing to show"
    stale = {(round_, stage): why for stage, round_, why in stale_stages(tmp_path / f"run={RUN}")}
    assert stale[0, "signals"] == "reads round 0 rollout's trajectories, rewritten since it ran"

    gone = 0
    for task_id, refs in lineages(tmp_path).items():
        for trajectory in {refs["signal"], *refs["explored"]}:
            if trajectory in after:  # an id still in the run names the very episode it was made from
                assert after[trajectory] == before[trajectory], (task_id, trajectory)
            else:  # the episode was replaced: the stage whose rows name it is stale
                assert trajectory == refs["signal"] and (0, "signals") in stale, (task_id, trajectory)
        resolved = refs["resolved"]
        if resolved["trajectory"] is None:
            gone += 1
            assert resolved["why"].startswith("not in the run any more"), resolved
            assert "round 0 signals is stale" in resolved["why"], resolved
    assert gone, "no signal's episode changed: the test shows nothing"
    page = _task_page(tmp_path, next(t for t, refs in lineages(tmp_path).items() if refs["resolved"]["why"]))
    assert "the episode is not in the run any more: its stage was re-run with other episodes" in page


def _task_page(root, task_id: str) -> str:
    import html

    from starlette.testclient import TestClient

    from coevolve.ui.app import create_app

    return html.unescape(TestClient(create_app(root), base_url="http://127.0.0.1").get(f"/runs/{RUN}/tasks/{task_id}").text)
