"""An open vocabulary: records by name, the phase's own declared with it, more added by a package (`add`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Records of one vocabulary by `name_of(record)`, in the order they were declared."""

    def __init__(self, what: str, name_of: Callable[[T], str], own: Iterable[T]) -> None:
        self.what, self._name_of = what, name_of
        self._items = {name_of(item): item for item in own}
        self._own = frozenset(self._items)

    def add(self, item: T) -> T:
        """Register `item` (again: no change); another record under a known name is refused."""
        name, known = self._name_of(item), self._items.get(self._name_of(item))
        if known is not None and known != item:
            raise ValueError(f"{self.what} {name!r} is already declared otherwise: {known}")
        self._items[name] = item
        return item

    def remove(self, name: str) -> None:
        """Forget a record a package added (the phase's own stay)."""
        if name in self._own:
            raise ValueError(f"{self.what} {name!r} is one of the phase's own")
        self._items.pop(name, None)

    def items(self) -> tuple[T, ...]:
        return tuple(self._items.values())

    def get(self, name: str) -> T | None:
        return self._items.get(name)
