"""A registry of named plug-ins that a request field names (the workflows, the backends).

The request model asks it whether a name is known and the schema lists its names; the package
that defines the plug-ins fills it when imported. It holds no plug-in names of its own.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Plug-ins by name, in the order they were registered (the schema's order)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"a {self.what} named {name!r} is registered already")
        self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"no {self.what} named {name!r}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def items(self) -> tuple[T, ...]:
        return tuple(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items


# Filled by `trtllm_script_builder.workflows`; the layers below it type what they take out
# (resolve/workflow.py), so the model does not depend on the layers above it.
WORKFLOWS: Registry[Any] = Registry("workflow")

# Filled by `trtllm_script_builder.backends`, one object per backend under each execution
# scenario it serves (resolve/backend.py types it).
BACKENDS: Registry[Any] = Registry("backend")
