"""A stage sees only the config its cache key covers: reading an undeclared field, or building an
environment without declaring `env`, stops the stage with one line naming it; declared sections, fields
and the derived properties of declared fields read as the config's own values."""

from __future__ import annotations

import pytest

from coevolve.config import load_config
from coevolve.flows.run_context import open_run
from coevolve.pipeline.declared import UndeclaredConfigError
from coevolve.pipeline.runner import run_stage
from coevolve.pipeline.stage import StageDef, StageResult
from tests.conftest import CONFIGS


@pytest.fixture
def ctx(tmp_path):
    return open_run(load_config(CONFIGS / "test-tiny.yaml"), "demo", tmp_path, quiet=True)


def reading(config: tuple[str, ...], read) -> StageDef:
    return StageDef("rollout", 1, config=config, reads={},
                    compute=lambda ctx, round_, inputs: StageResult({}, {"read": read(ctx)}))  # fmt: skip


def test_declared_sections_fields_and_derived_values_read_as_the_config(ctx):
    stage = reading(("rollout", "run.seed", "dataset.sample_seed"),
                    lambda c: [c.config.rollout.k, c.config.run.seed, c.config.value("rollout.temperature"),
                               c.config.d0_sample_seed])  # fmt: skip
    config = ctx.config
    expected = [config.rollout.k, config.run.seed, config.rollout.temperature, config.d0_sample_seed]
    assert run_stage(stage, ctx, 0).manifest.outputs == {"read": expected}


@pytest.mark.parametrize(("declared", "read", "field"), [
    (("rollout",), lambda c: c.config.train.lr, "train"),
    (("run.seed",), lambda c: c.config.run.name, "run.name"),
    (("rollout",), lambda c: c.config.value("eval.max_tasks"), "eval"),
    (("run.seed",), lambda c: c.config.d0_sample_seed, "d0_sample_seed"),  # also needs dataset.sample_seed
])  # fmt: skip
def test_an_undeclared_field_stops_the_stage_naming_it(ctx, declared, read, field):
    with pytest.raises(UndeclaredConfigError, match=rf"stage 'rollout' reads config `{field}`, which its StageDef"):
        run_stage(reading(declared, read), ctx, 0)
    assert ctx.store.manifest(0, "rollout") is None  # nothing cached under a key that misses the field


def test_building_an_environment_needs_env_declared(ctx):
    with pytest.raises(UndeclaredConfigError, match=r"stage 'rollout' builds environments.*`env`"):
        run_stage(reading(("rollout",), lambda c: c.make_env().name), ctx, 0)
    assert run_stage(reading(("rollout", "env"), lambda c: type(c.make_env()).__name__), ctx, 0).manifest.outputs
