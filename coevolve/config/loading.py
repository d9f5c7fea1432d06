"""The root run config: YAML file + `--set key=value` overrides -> one frozen, validated model.

    cfg = load_config("configs/toolworld-smollm2.yaml", ["rollout.k=4"])

Any problem (missing file, bad YAML, unknown key, bad value, malformed override) raises `ConfigError`
with one message naming the file and the field.

A config path that is not a file in the working directory falls back to the copy shipped in the package
(`find_config`): `configs/test-tiny.yaml`, `test-tiny.yaml` and `test-tiny` all find the packaged
`test-tiny.yaml`, so an installed `coevolve run test-tiny` works from any directory.
"""

from __future__ import annotations

import re
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
        problems = {}  # source -> its problems: an override's own value is blamed on the override
        for e in exc.errors():
            field, said = _problem(e)
            blamed = _override_setting(field, overrides)
            problems.setdefault(f"--set {blamed}" if blamed else source, []).append(f"{field}: {said}")
        raise ConfigError("; ".join(f"{where}: {'; '.join(said)}" for where, said in problems.items())) from None


_FIELD_PATH = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+$")
_BOUNDS = ("gt", "ge", "lt", "le", "max_length")


def _problem(error: Any) -> tuple[str, str]:
    """The field a validation error is about and what is wrong with it. A validator that checks several
    fields names the one it blames (`train.lora_alpha: ...`); a value out of bounds says what was given."""
    field = ".".join(str(p) for p in error["loc"])
    said = error["msg"].removeprefix("Value error, ")
    named, sep, rest = said.partition(": ")
    if error["type"] == "value_error" and sep and _FIELD_PATH.match(named):
        return named, rest
    if any(bound in error.get("ctx", {}) for bound in _BOUNDS) and not isinstance(error["input"], dict | list):
        said += f" (got {error['input']!r})"
    return field, said


def _override_setting(field: str, overrides: list[str] | tuple[str, ...]) -> str | None:
    """The last override that set `field` or a section holding it, if any."""
    for override in reversed(overrides):
        key = override.partition("=")[0].strip()
        if field == key or field.startswith(f"{key}."):
            return override
    return None


def packaged_configs() -> Path:
    """The folder of the configs shipped in the package (in a checkout: the repository's `configs/`)."""
    from importlib.resources import files

    return Path(str(files("coevolve.configs")))


def find_config(path: str | Path) -> Path:
    """`path` if it is a file; else, for a relative path, the packaged file of that name: a leading
    `configs/` is dropped and `.yaml` added when there is no suffix (`configs/accelerate/two-processes.yaml`,
    `test-tiny.yaml`, `test-tiny`). Raises `ConfigError` listing the packaged configs when neither exists."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_absolute():
        parts = path.parts[1:] if path.parts[:1] == ("configs",) else path.parts
        candidate = packaged_configs().joinpath(*parts)
        if not candidate.suffix:
            candidate = candidate.with_suffix(".yaml")
        if candidate.is_file():
            return candidate
    shipped = ", ".join(sorted(p.stem for p in packaged_configs().glob("*.yaml")))
    raise ConfigError(f"config file {path} not found, here or among the packaged configs ({shipped}; "
                      f"in {packaged_configs()})")


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> CoevolveConfig:
    path = find_config(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from exc
    return parse_config(data, source=str(path), overrides=overrides)


def _has(data: dict[str, Any], dotted: str) -> bool:
    section, _, field = dotted.partition(".")
    return isinstance(data.get(section), dict) and field in data[section]
