"""The `warm_start` config section: starts named by content in the model cache, built once per machine by
the run that needs them, and the run's saved config keeping what the user wrote."""

from __future__ import annotations

import json

import pytest

from coevolve.config import ConfigError, load_config
from coevolve.flows.run_context import open_run
from coevolve.llm.models import resolve_model
from coevolve.stages.warm_start.build import RECORD, with_warm_starts
from tests.conftest import CONFIGS

TINY_STARTS = ["warm_start.policy_tasks=2", "warm_start.teacher_tasks=2", "warm_start.epochs=1"]


def test_warm_starts_are_named_by_content_and_naming_twice_changes_nothing():
    spec = load_config(CONFIGS / "test-tiny.yaml", TINY_STARTS)
    named = with_warm_starts(spec)
    assert named.model.name.startswith("warm-start/") and named.teacher.type == "local"
    assert named.teacher.model.startswith("warm-start/teacher-") and named.teacher.temperature == spec.teacher.temperature
    assert with_warm_starts(named) == named
    other = with_warm_starts(load_config(CONFIGS / "test-tiny.yaml", [*TINY_STARTS, "warm_start.lr=1e-4"]))
    assert other.model.name != named.model.name and other.teacher.model != named.teacher.model
    plain = load_config(CONFIGS / "test-tiny.yaml")
    assert with_warm_starts(plain) == plain


def test_a_teacher_start_needs_a_policy_teacher():
    with pytest.raises(ConfigError, match="warm_start.teacher_tasks.*teacher.type: policy"):
        load_config(CONFIGS / "test-tiny.yaml", ["warm_start.teacher_tasks=4", "teacher.type=openai",
                                                 "teacher.model=some-model"])  # fmt: skip


def test_an_unbuilt_start_is_one_line_naming_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="warm-start/0123abcd.*coevolve run CONFIG"):
        resolve_model("warm-start/0123abcd")


@pytest.mark.slow
def test_a_run_builds_its_starts_once_and_saves_the_config_as_written(tmp_path, monkeypatch):
    from coevolve.flows.coevolve import save_resolved_config

    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path / "cache"))
    spec = load_config(CONFIGS / "test-tiny.yaml", TINY_STARTS)
    ctx = open_run(spec, "starts", tmp_path / "runs")
    ctx.build_warm_starts()
    policy, teacher = resolve_model(ctx.config.model.name), resolve_model(ctx.config.teacher.model)
    assert policy.parent == teacher.parent == tmp_path / "cache" / "warm-start"
    assert json.loads((teacher / RECORD).read_text())["start"] == f"warm-start/{policy.name}"
    stamps = [(path / RECORD).stat().st_mtime_ns for path in (policy, teacher)]
    again = open_run(spec, "starts-2", tmp_path / "runs")
    again.build_warm_starts()
    assert again.config == ctx.config and [(p / RECORD).stat().st_mtime_ns for p in (policy, teacher)] == stamps
    assert again.use_policy(-1).model.config.model_type == "llama"
    save_resolved_config(ctx)
    assert load_config(ctx.store.layout.config_path) == spec


@pytest.mark.slow
def test_the_warm_start_step_records_which_starts_a_run_uses(tmp_path, monkeypatch):
    from coevolve.file_hashes import file_sha256
    from coevolve.pipeline.runner import run_stage
    from coevolve.stages.round_plan import round_plan
    from coevolve.stages.warm_start.stage import WARM_START

    monkeypatch.setenv("COEVOLVE_CACHE", str(tmp_path / "cache"))
    spec = load_config(CONFIGS / "test-tiny.yaml", TINY_STARTS)
    assert [s.name for s in round_plan(spec, 0)][:2] == ["warm-start", "bootstrap"]
    assert "warm-start" not in [s.name for s in round_plan(spec, 1)]
    assert "warm-start" not in [s.name for s in round_plan(load_config(CONFIGS / "test-tiny.yaml"), 0)]

    ctx = open_run(spec, "starts", tmp_path / "runs")
    first = run_stage(WARM_START, ctx, 0).manifest.outputs
    assert first["policy"]["name"] == ctx.config.model.name and first["teacher"]["name"] == ctx.config.teacher.model
    assert first["policy"]["built_now"] and first["teacher"]["built_now"] and first["policy"]["settings"]["tasks"] == 2
    weights = resolve_model(ctx.config.model.name) / "model.safetensors"
    assert first["policy"]["weights_sha256"] == {"model.safetensors": file_sha256(weights)}

    other = open_run(spec, "starts-2", tmp_path / "runs")  # another run on this machine: found, not built
    second = run_stage(WARM_START, other, 0).manifest.outputs
    assert not second["policy"]["built_now"] and second["policy"]["weights_sha256"] == first["policy"]["weights_sha256"]
    assert run_stage(WARM_START, ctx, 0).cached
