"""Config: YAML + overrides -> frozen model; every problem names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.config import ConfigError, load_config

CONFIGS = sorted(Path(__file__).resolve().parents[2].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert cfg.rollout.k >= 1


def test_overrides_apply_and_parse_yaml_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rollout: {k: 8}\n")
    cfg = load_config(path, ["rollout.k=4", "eval.splits=[test, heldout-templates]", "train.lr=1e-4"])
    assert cfg.rollout.k == 4
    assert cfg.eval.splits == ("test", "heldout-templates")
    assert cfg.train.lr == pytest.approx(1e-4)


def test_config_is_frozen(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("{}\n")
    cfg = load_config(path)
    with pytest.raises(Exception, match="frozen"):
        cfg.rollout.k = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "overrides", "message"),
    [
        ("rollout: {kk: 3}\n", [], r"c\.yaml: rollout\.kk: Extra inputs"),
        ("rollout: {k: 0}\n", [], r"c\.yaml: rollout\.k: Input should be greater"),
        ("model: {dtype: int4}\n", [], r"c\.yaml: model\.dtype"),
        ("rollout: [1, 2]\n", [], r"c\.yaml: rollout"),
        ("- a\n", [], r"c\.yaml: expected a mapping"),
        ("rollout: {k: [\n", [], r"c\.yaml: invalid YAML"),
        ("{}\n", ["rollout.k"], r"expected KEY=VALUE"),
        ("{}\n", ["rollout.k=abc"], r"^--set rollout\.k=abc: rollout\.k: Input should be a valid integer"),
        ("rollout: {kk: 3}\n", ["rollout.k=0"],
         r"^--set rollout\.k=0: rollout\.k: Input should be greater.*; .*c\.yaml: rollout\.kk: Extra inputs"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path, text, overrides, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path, overrides)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml not found"):
        load_config(tmp_path / "nope.yaml")


def test_an_unreachable_ray_address_fails_fast_naming_the_field():
    from coevolve.executors.ray_envs import connect
    from tests.conftest import free_port

    with pytest.raises(ConnectionError, match=r"runtime.ray_address: nothing answers at '127.0.0.1:\d+'"):
        connect(f"127.0.0.1:{free_port()}")
