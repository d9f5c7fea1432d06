"""What a run config names must exist: checked before Prefect starts or a model loads.

A config can be valid YAML with valid types and still name a model directory that is not there, an
environment that is not installed, an option its constructor does not take, a split it does not have, or
a tracker whose package is missing. Each becomes one `ConfigError` line naming the field and what it may
be, instead of a traceback from deep inside a stage.

    check_run_config(cfg)      # ConfigError("eval.splits: toolworld has no split 'tset'; its splits: ...")
"""

from __future__ import annotations

import inspect
from pathlib import Path

from coevolve import envs
from coevolve.config import CoevolveConfig, ConfigError
from coevolve.flows.tracking import check_trackers


def check_run_config(config: CoevolveConfig) -> None:
    """Raise `ConfigError` naming the first field whose model, environment, option or split does not exist."""
    check_model("model.name", config.model.name)
    if config.teacher.type == "local":
        check_model("teacher.model", config.teacher.model)
    check_trackers(config)
    env = check_environment(config.env.name, config.env.options)
    splits = env.splits()
    named = [("eval.splits", s) for s in config.eval.splits]
    named += [(f"dataset.{f}", getattr(config.dataset, f)) for f in ("seed_split", "bootstrap_split")]
    for field, split in named:
        if split is not None and split not in splits:
            raise ConfigError(f"{field}: {config.env.name} has no split {split!r}; its splits: {', '.join(splits)}")
    check_training_apart(config, env)


def check_training_apart(config: CoevolveConfig, env: envs.Environment) -> None:
    """Raise `ConfigError` naming both splits when a source of D_0 (`dataset.seed_split`, and
    `dataset.bootstrap_split` when `bootstrap_tasks` explores it) shares a task, or a world (an initial state),
    with a held-out split: training would then see what evaluation tests. An environment whose tasks cannot
    be listed here (a server not up) is left to the run, which lists them first."""
    from coevolve.core import content_hash

    sources = [("dataset.seed_split", config.dataset.seed_split)]
    sources += [("dataset.bootstrap_split", config.dataset.bootstrap_split)] if config.dataset.bootstrap_tasks else []
    try:
        held = {split: env.tasks(split) for split in config.eval.splits}
        train = {split: env.tasks(split) for _, split in sources if split is not None}
    except Exception:  # listing needs a server that is not up: the run will say so itself
        return
    for field, split in sources:
        if split is None:
            continue
        ids, worlds = {t.id for t in train[split]}, {content_hash(t.initial_state) for t in train[split]}
        for name, tasks in held.items():
            shared = sum(t.id in ids or content_hash(t.initial_state) in worlds for t in tasks)
            if shared:
                raise ConfigError(f"{field}: {split} shares {shared} tasks or worlds with the held-out split {name} "
                                  f"(eval.splits); train on a split disjoint from it")  # fmt: skip


def check_model(field: str, name: str) -> None:
    from coevolve.llm.models import builtin_models

    if name in builtin_models() or Path(name).expanduser().is_dir():
        return
    if name.startswith(("/", ".", "~")) or name.count("/") != 1:  # a path, or no `org/name` hub id
        raise ConfigError(f"{field}: {name!r} is neither a model directory nor a built-in model "
                          f"({', '.join(builtin_models())}) nor a hub id (org/name)")  # fmt: skip


def check_environment(name: str, options: dict) -> envs.Environment:
    if name not in envs.available():
        raise ConfigError(f"env.name: unknown environment {name!r}; available: {', '.join(envs.available())}")
    accepted = list(inspect.signature(envs.environment_class(name)).parameters)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(f"env.options.{unknown[0]}: {name} takes no such option; its options: {', '.join(accepted)}")
    try:
        return envs.make(name, **options)
    except envs.OptionError as exc:  # already `env.options.<field>: ...`
        raise ConfigError(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env.options: {exc}") from None
