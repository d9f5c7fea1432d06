"""The second OpenEnv fixture, the lamp panel (`envs.openenv.example_lamps`): a plain OpenEnv `Environment`
(no MCP server of its own, no task source, no `verify`) scored by a composite of OpenEnv's rubrics, whose
episode ends when the agent submits. Through the adapter, in process, its tasks from a Parquet file: every
reference replays to reward 1.0, doing nothing and a wrong panel to 0.0; the environment offers TaskSynthesis
and its verify stage admits the reference and refuses the rest; the same panel without a rubric is refused
TaskSynthesis in one line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openenv", reason="the openenv extra is not installed (pip install -e '.[openenv]')")

from coevolve import envs  # noqa: E402
from coevolve.envs.base import TaskSynthesis  # noqa: E402
from coevolve.envs.openenv.example_lamps import LampPanel, lamp_rows  # noqa: E402
from coevolve.stages.verify.candidates import Rejected  # noqa: E402
from coevolve.stages.verify.checks import check_candidate  # noqa: E402
from coevolve.stages.verify.contamination import HeldOut  # noqa: E402
from coevolve.stages.verify.settings import VerifySettings  # noqa: E402

PANEL = "coevolve.envs.openenv.example_lamps:LampPanel"
UNSCORED = "tests.unit.test_openenv_lamps:UnscoredPanel"


class UnscoredPanel(LampPanel):
    """The panel without its rubric: it scores nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.rubric = None


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{**row, "reset": json.dumps(row["reset"]), "solution": json.dumps(row["solution"])} for row in lamp_rows()]
    path = tmp_path_factory.mktemp("lamps") / "lamps.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture(scope="module")
def panel(task_file):
    return envs.make("openenv", environment=PANEL, tasks=task_file)


def played(env, task, actions):
    observation = env.reset(task)
    results = [env.step(action) for action in actions]
    return env.evaluate().reward, observation, results


def test_the_tasks_come_from_the_parquet_file(panel):
    assert panel.splits() == ["train", "test"] and len(panel.tasks("train")) == 6
    task = panel.tasks("train")[0]
    assert task.initial_state == {"lamps": "1001", "target": "0001"} and task.solution[0][-1].name == "submit"


@pytest.mark.parametrize("split", ["train", "test"])
def test_reference_scores_one_doing_nothing_and_a_wrong_panel_zero(panel, split):
    for task in panel.tasks(split):
        reference = [call.model_dump() for call in task.solution[0]]
        reward, observation, results = played(panel, task, [reference])
        assert reward == 1.0 and results[-1].done  # submit ends the episode
        assert {t["function"]["name"] for t in observation.tools} == {"read_panel", "toggle", "submit"}
        assert played(panel, task, ["I would rather not."])[0] == 0.0
        wrong = [{"name": "toggle", "arguments": {"lamp": 1}}, *reference]  # one lamp too many
        assert played(panel, task, [wrong])[0] == 0.0
        assert played(panel, task, [reference[:-1], "Done."])[0] == 0.0  # right panel, never submitted


def test_a_bad_call_is_the_agent_s_error_and_the_episode_goes_on(panel):
    task = panel.tasks("train")[0]
    reward, _, results = played(panel, task, [[{"name": "toggle", "arguments": {"lamp": 9}}],
                                              [{"name": "paint", "arguments": {}}],
                                              [call.model_dump() for call in task.solution[0]]])  # fmt: skip
    assert results[0].messages[0]["content"] == "Error: lamp must be a number from 1 to 4 (got 9)"
    assert results[1].messages[0]["content"].startswith("Error: unknown tool 'paint'")
    assert reward == 1.0


def candidate(task, calls):
    return {"candidate_id": "c", "group_id": "g-c", "exploration_id": "x", "task_id": task.id, "env": "openenv",
            "status": "ok", "query": task.turns[0], "solution": json.dumps(calls), "answers": "[]",
            "initial_state": json.dumps(task.initial_state)}  # fmt: skip


def verdict(make, row):
    try:
        return "accepted", check_candidate(make, row, HeldOut(), VerifySettings()).task.checker
    except Rejected as refused:
        return "rejected", str(refused)


def test_the_panel_verifies_candidates_by_its_rubric(panel, task_file):
    assert panel.offers(TaskSynthesis) and panel.synthesis_refusal() is None
    make = lambda: envs.make("openenv", environment=PANEL, tasks=task_file)  # noqa: E731
    task = panel.tasks("train")[1]
    reference = [call.model_dump() for call in task.solution[0]]
    outcome, checker = verdict(make, candidate(task, reference))
    assert outcome == "accepted" and (checker["reference_reward"], checker["idle_reward"]) == (1.0, 0.0)
    for calls in ([], reference[:-1], [{"name": "toggle", "arguments": {"lamp": 1}}, *reference]):
        outcome, reason = verdict(make, candidate(task, calls))
        assert outcome == "rejected" and reason.startswith("replay: ") and "reward 0.00" in reason, reason


def test_without_a_rubric_the_panel_is_refused_task_synthesis_in_one_line(task_file):
    unscored = envs.make("openenv", environment=UNSCORED, tasks=task_file)
    assert not unscored.offers(TaskSynthesis)
    assert unscored.synthesis_refusal() == (f"{UNSCORED} has neither a rubric nor verify: it scores no final "
                                            "state, so it cannot verify a synthesized task (TaskSynthesis not "
                                            "offered)")  # fmt: skip
    task = unscored.tasks("train")[0]
    outcome, reason = verdict(lambda: unscored, candidate(task, [c.model_dump() for c in task.solution[0]]))
    assert outcome == "rejected" and "does not offer the TaskSynthesis role" in reason
