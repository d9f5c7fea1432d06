"""Environment episodes in Ray actors: one environment instance per actor process.

With `runtime.ray_address` set, `RunContext.make_env` hands out `RemoteEnvironment`s from a `RayEnvPool`
instead of in-process environments, for every stage that runs episodes (rollout, evaluation,
exploration, verification). Each actor holds one environment made by `envs.make(name, **options)` in
its own process (AppWorld allows one world per process) and serves one episode at a time; `close()`
gives the actor back to the pool for the next episode, so actors are started once per driver process.

    pool = RayEnvPool("127.0.0.1:6379", "bfcl", {"category": "multi_turn_base"})
    env = pool.make()              # an Environment: reset / step / evaluate / close run in the actor
    pending = env.submit_step(reply)   # the agent loop starts every live episode's step at once ...
    result = pending()                 # ... then waits for each (see `agents.episodes`)

The pool grows on demand (doubling, so actor start-up runs in parallel) and never shrinks; actors reserve
`actor_cpus` CPUs each (default 0: environments mostly wait on I/O or are cheap Python, and Ray's default
of 1 CPU per actor would cap the pool at the cluster's core count). Workers import this package, so
every node needs it installed (the same venv on one machine does). Errors raised by the environment
come back as the same exception types; a dead actor raises `ray.exceptions.RayActorError` and is dropped
from the pool.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from coevolve import envs
from coevolve.envs.base import Action, EnvironmentWrapper, StepResult


class EnvHost:
    """What runs inside one actor: one environment, driven method by method."""

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self._env = envs.make(name, **options)

    def describe(self) -> tuple[str, list[str]]:
        """The environment's name and its public methods (so the proxy forwards exactly those)."""
        methods = [m for m in dir(self._env) if not m.startswith("_") and callable(getattr(self._env, m))]
        return self._env.name, methods

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self._env, method)(*args, **kwargs)


def connect(address: str) -> None:
    """Join the Ray cluster at `address` once per process (a clear error if nobody is there)."""
    import ray

    if ray.is_initialized():
        return
    _check_reachable(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConnectionError(
            f"runtime.ray_address: cannot join the Ray cluster at {address!r}: {exc}"
        ) from exc


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds on a `host:port` nobody listens on (`ray.init` would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # `auto`, `ray://...`: left to Ray
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(
            f"runtime.ray_address: nothing answers at {address!r} ({exc}); start a head with `ray start --head`"
        ) from exc


class RayEnvPool:
    """Ray actors holding one `envs.make(name, **options)` environment each; `make()` lends one out."""

    def __init__(self, address: str, name: str, options: dict[str, Any], *, actor_cpus: float = 0.0) -> None:
        import ray

        connect(address)
        self._ray = ray
        self._host = ray.remote(EnvHost).options(num_cpus=actor_cpus)
        self.name, self.options = name, dict(options)
        self._free: list[Any] = []
        self._actors: list[Any] = []
        self._methods: tuple[str, frozenset[str]] | None = None
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Actors started so far (lent out or free)."""
        return len(self._actors)

    def make(self) -> RemoteEnvironment:
        with self._lock:
            if not self._free:
                self._grow(max(1, len(self._actors)))
            actor = self._free.pop()
        if self._methods is None:
            name, methods = self._ray.get(actor.describe.remote())
            self._methods = name, frozenset(methods)
        return RemoteEnvironment(self, actor, *self._methods)

    def _grow(self, count: int) -> None:
        started = [self._host.remote(self.name, self.options) for _ in range(count)]
        self._actors.extend(started)
        self._free.extend(reversed(started))

    def give_back(self, actor: Any, *, alive: bool) -> None:
        with self._lock:
            if alive:
                self._free.append(actor)
            else:
                self._actors.remove(actor)

    def shutdown(self) -> None:
        """Kill every actor (the driver's exit does the same)."""
        with self._lock:
            for actor in self._actors:
                self._ray.kill(actor)
            self._actors.clear()
            self._free.clear()


class ActorMethods:
    """The methods of the environment in one pooled Ray actor, called by name: each call runs there and
    returns its result (a method the actor's environment lacks is an AttributeError here)."""

    def __init__(self, pool: RayEnvPool, actor: Any, name: str, methods: frozenset[str]) -> None:
        self._pool, self._actor, self._methods, self.name = pool, actor, methods, name
        self.closed = False

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Start `method` in the actor; the Ray object reference of its result."""
        if self.closed:
            raise RuntimeError(f"{self.name} environment used after close()")
        return self._actor.call.remote(method, args, kwargs)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_") or method not in self._methods:
            raise AttributeError(f"{self.name} environment has no method {method!r}")
        return lambda *args, **kwargs: self._pool._ray.get(self.submit(method, *args, **kwargs))


class RemoteEnvironment(EnvironmentWrapper):
    """An `Environment` whose every method runs in a pooled Ray actor (`ActorMethods`), the optional roles
    included where the actor's environment offers them; only stepping (started at once, awaited later)
    and closing (the actor goes back to the pool) are its own."""

    def __init__(self, pool: RayEnvPool, actor: Any, name: str, methods: frozenset[str]) -> None:
        super().__init__(ActorMethods(pool, actor, name, methods))  # type: ignore[arg-type]
        self._pool, self._actor = pool, actor

    def submit_step(self, action: Action) -> Callable[[], StepResult]:
        """Start `step(action)` in the actor now; the returned function waits for its result."""
        ref = self.inner.submit("step", action)
        return lambda: self._pool._ray.get(ref)

    def close(self) -> None:
        """Close the environment in the actor and give the actor back (dropped if it died)."""
        if self.inner.closed:
            return
        alive = True
        try:
            self.inner.close()
        except self._pool._ray.exceptions.RayActorError:
            alive = False
        finally:
            self.inner.closed = True
            self._pool.give_back(self._actor, alive=alive)
