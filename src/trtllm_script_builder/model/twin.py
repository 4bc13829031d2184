"""A pydantic model made from a plain model class's own fields, built only when needed.

The build path uses plain classes (building pydantic models costs more than a build); reading
a file that may be wrong, and writing a JSON Schema, use the pydantic twin. Making the twin
from the class keeps the two from drifting: one list of fields, types and defaults.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel


def pydantic_twin(
    cls: type,
    *,
    extra: str,
    swap: dict[Any, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    constraints: dict[str, dict[str, Any]] | None = None,
    every_field: tuple[Callable[[Any], Any], ...] = (),
    validators: dict[str, Any] | None = None,
    doc: bool = False,
    strict: bool = False,
) -> type[BaseModel]:
    """The twin of dataclass `cls`: `swap` maps a field type (or a default factory) to the twin
    that stands for it, `annotations` replaces a field's type, `constraints` adds Field
    arguments (ge, le, ...); `doc` carries the class docstring into the schema; `strict` takes
    a value only in the type the schema names (no "2" for 2, no "yes" for true).

    A field's metadata may hold its `description`, `ge`, and `before`/`after` checks (plain
    functions, run by pydantic as before/after validators); `every_field` checks run before
    each field's own.
    """
    from typing import Annotated

    from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, create_model

    swap = swap or {}
    hints = typing.get_type_hints(cls)
    specs: dict[str, Any] = {}
    for f in fields(cls):
        annotation = (annotations or {}).get(f.name) or swap.get(hints[f.name], hints[f.name])
        kwargs = dict((constraints or {}).get(f.name, {}))
        meta = f.metadata
        if "description" in meta:
            kwargs["description"] = meta["description"]
        if f.default is not MISSING:
            kwargs["default"] = f.default
        elif f.default_factory is not MISSING:
            kwargs["default_factory"] = swap.get(f.default_factory, f.default_factory)
        if meta.get("ge") is not None:
            kwargs["ge"] = meta["ge"]
        # Annotated runs before-validators right to left: the given order, reversed.
        checks: list[Any] = [
            BeforeValidator(c) for c in reversed(every_field + meta.get("before", ()))
        ]
        checks += [AfterValidator(c) for c in meta.get("after", ())]
        hint = Annotated[tuple([annotation, *checks])] if checks else annotation
        specs[f.name] = (hint, Field(**kwargs))
    model: type[BaseModel] = create_model(
        cls.__name__,
        __config__=ConfigDict(extra=extra, strict=strict),  # type: ignore[typeddict-item]
        __doc__=cls.__doc__ if doc else None,
        __module__=cls.__module__,
        __validators__=validators,
        **specs,
    )
    return model
