"""The root run config: YAML file + `--set key=value` overrides -> one frozen, validated model.

    cfg = load_config("configs/toolworld-smollm2.yaml", ["rollout.k=4"])

Any problem (missing file, bad YAML, unknown key, bad value, malformed override) raises `ConfigError`
with one message naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from coevolve.config.evolution import MOVED_FIELDS
from coevolve.config.models import CoevolveConfig


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the file and field."""


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to nested dict `data` in place."""
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r}: expected KEY=VALUE, e.g. rollout.k=4")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: value is not valid YAML ({exc})") from exc
    *parents, leaf = key.strip().split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part!r} is not a section")
        node = child
    node[leaf] = value


def parse_config(data: Any, *, source: str, overrides: list[str] | tuple[str, ...] = ()) -> CoevolveConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level")
    for override in overrides:
        apply_override(data, override)
    moved = [f"{old} is now {new}" for old, new in MOVED_FIELDS.items() if _has(data, old)]
    if moved:
        raise ConfigError(f"{source}: {'; '.join(moved)} (config sections follow the stages that read them)")
    try:
        return CoevolveConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source}: {problems}") from None


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> CoevolveConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found (see configs/ for examples)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from exc
    return parse_config(data, source=str(path), overrides=overrides)


def _has(data: dict[str, Any], dotted: str) -> bool:
    section, _, field = dotted.partition(".")
    return isinstance(data.get(section), dict) and field in data[section]
