"""Every request field as a command-line flag, shared by build, build-many and run.

The flags are generated from the Request model: its field names give the spellings
(`work_dir` -> `--work-dir`), its types the click types and completion (Literal, or a type
whose metadata lists choices -> choices, host paths -> files, int, bool -> `--x/--no-x`) and
its descriptions the --help text, so a new field is a flag, completes and is documented the
day it is added to the model.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import click

# (param_decls, attrs) of one click.Option
Spec = tuple[list[str], dict[str, Any]]


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def choices(kind: Any) -> tuple[str, ...] | None:
    """The values a field type allows: a Literal's, or those its metadata lists (the
    registered workflows, asked when the flags are made); None when any value of it goes."""
    if typing.get_origin(kind) is typing.Literal:
        return typing.get_args(kind)
    for meta in getattr(kind, "__metadata__", ()):
        if hasattr(meta, "choices"):
            return tuple(meta.choices())
    return None


def field_specs() -> list[Spec]:
    """The flag of every request field, in the model's order."""
    from pydantic import BaseModel

    from trtllm_script_builder.model.request import PATH_FIELDS, Request
    from trtllm_script_builder.workflows import WORKFLOWS

    assert WORKFLOWS.names()  # registered by the import: workflow_type's choices

    specs: list[Spec] = []
    for name, info in Request.model_fields.items():
        flag = flag_name(name)
        kind = _unwrap_optional(info.annotation)
        allowed = choices(kind)
        # Flags default to None, not to the field's default: an absent flag must leave the
        # request file's value alone.
        attrs: dict[str, Any] = {"default": None, "help": info.description}
        decls = [flag, name]
        if allowed is not None:
            attrs["type"] = click.Choice(allowed)
        elif kind is bool:
            decls = [f"{flag}/--no-{flag[2:]}", name]
        elif kind is int:
            attrs["type"] = int
        elif kind is str:
            if name in PATH_FIELDS:
                attrs["type"] = click.Path()
        elif isinstance(kind, type) and issubclass(kind, BaseModel):
            attrs["metavar"] = "JSON"  # parse_flag_values reads it as a JSON object
        else:  # pragma: no cover - a new kind of field needs its own flag type here
            raise TypeError(f"request field {name} has a type no flag is made for: {kind!r}")
        specs.append((decls, attrs))
    return specs


def field_options(f: Any) -> Any:
    """Decorator: add every request field's flag to a command function, in the model's order."""
    for decls, attrs in reversed(field_specs()):
        f = click.option(*decls, **attrs)(f)
    return f


class FieldsCommand(click.Command):
    """A command taking every request field as a flag, placed after its arguments.

    The flags are made when click first looks at the command's parameters (parsing, --help,
    completion), not when the CLI is imported: listing commands or running another one does
    not import pydantic and the model.
    """

    _explicit: list[click.Parameter]
    _with_fields: list[click.Parameter] | None = None

    @property
    def params(self) -> list[click.Parameter]:
        if self._with_fields is None:
            at = 0
            while at < len(self._explicit) and isinstance(self._explicit[at], click.Argument):
                at += 1
            fields: list[click.Parameter] = [click.Option(d, **a) for d, a in field_specs()]
            self._explicit[at:at] = fields
            self._with_fields = self._explicit
        return self._with_fields

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._explicit = value
        self._with_fields = None
