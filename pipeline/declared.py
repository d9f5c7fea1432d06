"""What a stage's compute function sees: the config fields it declares, and the run's services.

The cache key of a stage hashes exactly the config fields its `StageDef.config` names. A stage that read
another field would compute something its key does not cover: change that field and the stale rows
stay cached. So the runner hands compute a `StageContext`, whose `config` is a `DeclaredConfig`: the run's
config with every undeclared field raising `UndeclaredConfigError` (one line naming the stage and the
field), and whose services (environments, progress, the run's storage and policies) are the run
context's. A service that depends on config asks for it too: `make_env` needs `env` declared.

    cfg = DeclaredConfig(config, ("rollout", "run.seed"), "rollout")
    cfg.rollout.k            # declared section: any field of it
    cfg.run.seed             # declared field
    cfg.run.name             # UndeclaredConfigError: stage 'rollout' reads config `run.name` ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from coevolve.envs.base import Environment
    from coevolve.pipeline.context import RunContext


class UndeclaredConfigError(AttributeError):
    """A stage read a config field its declaration (and so its cache key) does not cover."""


DERIVED_FROM = {"gap_families": ("env.options",), "d0_sample_seed": ("dataset.sample_seed", "run.seed")}
"""The config's derived properties (`CoevolveConfig`) and the fields each is computed from."""


def _covers(declared: tuple[str, ...], path: str) -> bool:
    return any(path == d or path.startswith(d + ".") for d in declared)


class DeclaredConfig:
    """A read-only view of the config (or of one of its sections, `prefix`) limited to `declared` paths."""

    def __init__(self, node: BaseModel, declared: tuple[str, ...], stage: str, prefix: str = "") -> None:
        self._node, self._declared, self._stage, self._prefix = node, declared, stage, prefix

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        path = f"{self._prefix}.{name}" if self._prefix else name
        if _covers(self._declared, path):
            return getattr(self._node, name)
        if not self._prefix and name in DERIVED_FROM and all(_covers(self._declared, p) for p in DERIVED_FROM[name]):
            return getattr(self._node, name)
        if any(d.startswith(path + ".") for d in self._declared):
            return DeclaredConfig(getattr(self._node, name), self._declared, self._stage, path)
        raise UndeclaredConfigError(
            f"stage '{self._stage}' reads config `{path}`, which its StageDef does not declare (declared: "
            f"{', '.join(self._declared)}): add it to the declaration so the stage's cache key covers it"
        )

    def value(self, path: str) -> Any:
        """The value at a dotted path, as `CoevolveConfig.value`, if declared."""
        node: Any = self
        for part in path.split("."):
            node = getattr(node, part)
        return node

    def __repr__(self) -> str:
        return f"DeclaredConfig({self._stage}: {', '.join(self._declared)})"


FORWARDED = frozenset({
    "run", "store", "quiet", "say", "progress", "policy_after", "checked_policy_after", "build_warm_starts",
})  # fmt: skip
"""What a stage's context forwards from the run's: its name and storage, output, the policy versions
and checkpoints its reads named, the warm starts. Not the run's config in any other form."""


class StageContext:
    """The run context as one stage sees it: `config` limited to the stage's declared fields; the rest
    (storage, environments, policies, progress, run name) the run's."""

    def __init__(self, ctx: RunContext, declared: tuple[str, ...], stage: str) -> None:
        self._ctx, self._declared, self.stage = ctx, declared, stage
        self.config = DeclaredConfig(ctx.config, declared, stage)

    def __getattr__(self, name: str) -> Any:
        if name not in FORWARDED:
            raise AttributeError(f"a stage's context offers config and {', '.join(sorted(FORWARDED))}; not {name!r}")
        return getattr(self._ctx, name)

    def make_env(self) -> Environment:
        """A fresh environment; its task world is the `env` config, so the stage must declare it."""
        if not _covers(self._declared, "env"):
            raise UndeclaredConfigError(
                f"stage '{self.stage}' builds environments, which depend on config `env`; its StageDef does "
                f"not declare it (declared: {', '.join(self._declared)})"
            )
        return self._ctx.make_env()
