"""What the Prefect UI shows of a run: one task per stage named after it and tagged with run and round, a
cache hit as a `Cached` state, the round summaries and stage messages in the flow run's logs, and the
resolved config a run was handed (as `coevolve run` hands it) in the flow run's parameters."""

from __future__ import annotations

import pytest

from tests.conftest import CONFIGS

pytestmark = pytest.mark.slow


def _flow_run(state):
    return state.state_details.flow_run_id


def test_stages_are_named_tagged_tasks_and_a_rerun_shows_cached_states(tmp_path, monkeypatch, prefect_api):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    from coevolve.flows.coevolve import coevolve
    from coevolve.flows.runs import resolve_run

    monkeypatch.setenv("COEVOLVE_HOME", str(tmp_path))
    config = tmp_path / "tiny.yaml"
    config.write_text((CONFIGS / "test-tiny.yaml").read_text())
    first = coevolve(str(config), run="ui", rounds=1, return_state=True)
    spec = resolve_run(config, "ui", [])
    config.unlink()  # a resolved spec is all the flow reads
    again = coevolve(run="ui", rounds=1, spec=spec, return_state=True)
    APILogHandler().flush()
    assert first.is_completed() and again.is_completed(), (first, again)
    assert again.result()["rounds"] == [dict.fromkeys(["bootstrap", "baseline", "rollout", "grpo_update",
                                                       "evaluate"], "cached")]
    with get_client(sync_client=True) as client:
        def task_runs(state):
            return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[_flow_run(state)])))

        computed, cached = task_runs(first), task_runs(again)
        handed = client.read_flow_run(_flow_run(again))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[_flow_run(first)])))
    stages = ["bootstrap", "baseline", "rollout", "grpo_update", "evaluate"]
    assert sorted(r.name for r in computed) == sorted(f"{s}[0]" for s in stages)
    assert all({"run:ui", "round:0"} <= set(r.tags) for r in computed)
    assert {r.state.name for r in computed} == {"Completed"}
    assert {r.state.name for r in cached} == {"Cached"}
    assert handed.name == "ui to round 1"
    assert handed.parameters["spec"]["config"] == spec.config.model_dump(mode="json")
    messages = [log.message for log in logs]
    assert any(m.startswith("round 0 | train") for m in messages)  # the summary line reaches the UI
    assert any(m.startswith("rollout round 0: computed") for m in messages)
