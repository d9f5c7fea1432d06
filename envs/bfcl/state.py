"""A JSON-able view of the backends' public state, for `BfclEnv.state_digest`.

The checker compares every public attribute (no leading `_`) of every involved instance with `==`; this
renders the same attributes as plain data. Objects become {"__class__": name, public attributes}; a
reference back to an object already on the path (a directory's `parent`) becomes "<cycle>".
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 200


def public_state(instances: dict[str, Any]) -> dict[str, Any]:
    """{class name: rendered public attributes} of an episode's instances."""
    return {name: _render(instance, ()) for name, instance in instances.items()}


def _render(value: Any, path: tuple[int, ...]) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if id(value) in path or len(path) > MAX_DEPTH:
        return "<cycle>"
    inner = (*path, id(value))
    if isinstance(value, dict):
        return {str(k): _render(v, inner) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_render(v, inner) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if hasattr(value, "__dict__"):
        attributes = {k: _render(v, inner) for k, v in vars(value).items() if not k.startswith("_")}
        return {"__class__": type(value).__name__, **attributes}
    return repr(value)
