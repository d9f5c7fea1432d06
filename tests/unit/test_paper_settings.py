"""The paper's setting per config field (`coevolve.config.paper`) is the one source of what the dry run
says differs from the paper and of docs/reproduce.md's table: every config field is declared, a field moved
off the paper's value is named by the dry run, and the document shows the table as the code has it."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.cli import app
from coevolve.config import (
    CoevolveConfig,
    LocalTeacherConfig,
    OpenAITeacherConfig,
    PolicyTeacherConfig,
    load_config,
)
from coevolve.config.paper import NOT_PAPER_SETTINGS, SETTINGS, Equals, differences, markdown_table
from tests.conftest import CONFIGS

REPO = Path(__file__).resolve().parents[2]
BFCL = CONFIGS / "bfcl-qwen3-4b.yaml"


def _fields() -> set[str]:
    config = CoevolveConfig()
    paths = {f"{section}.{field}" for section in type(config).model_fields if section != "teacher"
             for field in type(getattr(config, section)).model_fields}  # fmt: skip
    for backend in (PolicyTeacherConfig, LocalTeacherConfig, OpenAITeacherConfig):
        paths |= {f"teacher.{field}" for field in backend.model_fields}
    return paths


def test_every_config_field_is_declared_against_the_paper_or_said_to_be_outside_it():
    declared = {s.path for s in SETTINGS} | set(NOT_PAPER_SETTINGS)
    assert sorted(_fields() - declared) == [], "add a row to coevolve.config.paper.SETTINGS"
    assert not {s.path for s in SETTINGS} & set(NOT_PAPER_SETTINGS)


def _moved(value) -> list:
    """Values other than `value` that the field's type may accept."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, (int, float)):
        return [value + 1 if value < 1 or isinstance(value, int) else value / 2]
    if value is None:
        return [2, "train"]
    if isinstance(value, str):
        return ["policy", "none", "oracle", "linear", "sequence", "round_robin", "mean_reward"]
    return []


@pytest.mark.parametrize("setting", [s for s in SETTINGS if isinstance(s.matches, Equals)], ids=lambda s: s.path)
def test_a_field_moved_off_the_papers_value_is_a_difference(setting):
    """Every row with a value: a paper config with that field changed differs from the paper on that row."""
    data = load_config(BFCL, ["evolve.every=10", "train.lora_rank=64"]).model_dump(mode="json")
    section, field = setting.path.split(".")
    if field not in data[section]:
        pytest.skip(f"{setting.path} is not a field of this version's config")
    for moved in _moved(setting.matches.expected):
        data[section][field] = moved
        try:
            config = CoevolveConfig.model_validate(data)
        except ValueError:
            continue
        if setting.applies(config):
            assert setting in [d.setting for d in differences(config)], moved
            return
    pytest.skip(f"no other valid value of {setting.path} tried here")


def dry_run(*overrides: str, config: Path = BFCL) -> str:
    args = ["run", str(config), "--dry-run", "--root", str(Path(tempfile.gettempdir()) / "coevolve-dry-runs")]
    for override in overrides:
        args += ["--set", override]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def _differences(output: str) -> str:
    return output[output.index("differs from the paper:"):]


def test_a_left_out_signal_and_the_seed_split_are_named_as_deviations():
    shipped = _differences(dry_run())
    assert "deviation: dataset.seed_split = ae-train (paper: none: D_0 is the N explored tasks only)" in shipped
    assert "deviation: eval.splits = [ae-test]" in shipped and "100 of the 200" in shipped
    assert "signals.kinds" not in shipped
    ablated = _differences(dry_run("signals.kinds=[boundary, rare]"))
    assert "deviation: signals.kinds = [boundary, rare] (paper: forgetting, boundary, rare)" in ablated
    explored_only = _differences(dry_run("dataset.seed_split=null"))
    assert "dataset.seed_split" not in explored_only  # the paper's D_0: the N explored tasks only
    assert "deviation: dataset.bootstrap_split = ae-train (paper: not said which worlds)" in explored_only


@pytest.mark.parametrize("path", ["train.lora_rank", "train.lr", "train.clip_low", "train.beta",
                                  "train.mini_batches", "rollout.max_replies", "rollout.max_context_tokens",
                                  "teacher.model", "run.rounds", "signals.rare_pattern"])  # fmt: skip
def test_what_the_paper_does_not_give_is_listed_as_chosen_here(path):
    assert f"deviation: {path} = " in _differences(dry_run())


def test_an_extension_is_labelled_and_the_paper_configs_turn_every_one_off():
    assert "extensions (not in the paper):\n    none" in dry_run()
    assert "extension: signals.rare_unused = True" in dry_run("signals.rare_unused=true")


def test_reproduce_md_shows_the_table_the_code_has():
    text = (REPO / "docs" / "reproduce.md").read_text()
    block = re.search(r"<!-- paper-settings -->\n(.*?)\n<!-- /paper-settings -->", text, re.S)
    assert block, "docs/reproduce.md lost its paper-settings block"
    assert block.group(1) == markdown_table(), "regenerate it: python -m coevolve.config.paper"
    assert "both lists are empty" not in text
