"""Every size a config can ask for is bounded, environment options included: an absurd size is refused in
one line naming the field and its bound, before anything is built in proportion to it."""

from __future__ import annotations

import resource
import subprocess
import sys
import types
from typing import Annotated, Union, get_args, get_origin

import annotated_types
import pytest

from coevolve.config import ConfigError, load_config
from coevolve.config.models import (
    DatasetConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    RunSection,
    RuntimeSection,
    WarmStartSection,
)
from coevolve.config.train import TrainConfig
from coevolve.flows.validate import check_environment
from tests.conftest import CONFIGS

MEMORY_CAP = 6 * 2**30
"""Address space the dry run may take: importing torch and the config needs far less, building a billion
tasks far more (today's code reached 14.7 GB)."""


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def test_a_dry_run_asking_for_a_billion_tasks_is_refused_in_seconds_naming_the_option(tmp_path):
    command = [sys.executable, "-m", "coevolve.cli", "run", str(CONFIGS / "test-tiny.yaml"), "--root", str(tmp_path),
               "--set", "env.options={n_train: 1000000000}", "--dry-run"]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, preexec_fn=_capped)
    except subprocess.TimeoutExpired:
        pytest.fail("the dry run was still building tasks after 30 s")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and "env.options.n_train" in lines[0] and "5000" in lines[0], lines


@pytest.mark.parametrize(("env", "options", "field"), [
    ("toolworld", {"n_test": 10**6}, "n_test"),
    ("toolworld", {"n_gap_test": -1}, "n_gap_test"),
    ("toolworld", {"max_steps_per_turn": 10**9}, "max_steps_per_turn"),
    ("bfcl", {"max_steps_per_turn": 10**9}, "max_steps_per_turn"),
    ("appworld", {"max_interactions": 10**9}, "max_interactions"),
    ("appworld", {"max_output_chars": 10**12}, "max_output_chars"),
    ("appworld", {"timeout": float("inf")}, "timeout"),
    ("toolworld", {"colour": "blue"}, "colour"),
])  # fmt: skip
def test_an_out_of_range_or_unknown_environment_option_is_one_line_naming_it(env, options, field):
    with pytest.raises(ConfigError) as refused:
        check_environment(env, options)
    message = str(refused.value)
    assert message.startswith(f"env.options.{field}: ") and "\n" not in message, message


def test_the_options_of_every_shipped_config_are_in_bounds():
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_config(path)
        if config.env.name == "toolworld":  # the others need their data or server to be built
            check_environment(config.env.name, config.env.options)


@pytest.mark.parametrize("override", [
    "train.lora_alpha=1e308", "train.max_grad_norm=1e300", "train.keep_checkpoints=1000000000",
    "eval.max_tasks=1000000000000", "eval.every=1000000000", "dataset.max_tasks=1000000000000",
    "warm_start.lora_alpha=1e308", "runtime.ray_actor_cpus=1e300",
])  # fmt: skip
def test_an_absurd_size_or_scale_is_refused_in_one_line_naming_its_field(override):
    field = override.partition("=")[0]
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIGS / "test-tiny.yaml", [override])
    message = str(refused.value)
    assert f"{field}: " in message and "less than" in message and "\n" not in message, message


UNBOUNDED_BY_DESIGN = {"seed", "sample_seed"}
"""Integers that are not sizes: any value costs the same."""


@pytest.mark.parametrize("section", [ModelConfig, DatasetConfig, RolloutConfig, EvalConfig, RunSection,
                                     RuntimeSection, WarmStartSection, TrainConfig])  # fmt: skip
def test_every_number_of_a_section_has_an_upper_bound(section):
    unbounded = [name for name, info in section.model_fields.items()
                 if _numeric(info.annotation) and name not in UNBOUNDED_BY_DESIGN
                 and not any(isinstance(m, (annotated_types.Le, annotated_types.Lt)) for m in info.metadata)]  # fmt: skip
    assert not unbounded, f"{section.__name__}: no upper bound on {unbounded}"


def _numeric(annotation: object) -> bool:
    if get_origin(annotation) in (Union, types.UnionType, Annotated):
        return any(_numeric(arg) for arg in get_args(annotation))
    return annotation in (int, float)


@pytest.mark.parametrize("section", ["train", "warm_start"])
def test_a_lora_scale_past_its_bound_is_blamed_on_lora_alpha(section):
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIGS / "test-tiny.yaml", [f"{section}.lora_rank=8", f"{section}.lora_alpha=1000"])
    message = str(refused.value)
    assert message.startswith(f"--set {section}.lora_alpha=1000: {section}.lora_alpha: ") and "\n" not in message
    assert "at most lora_alpha 512 for rank 8" in message
    assert load_config(CONFIGS / "test-tiny.yaml", [f"{section}.lora_rank=8", f"{section}.lora_alpha=512"])
