"""Every request field as a command-line flag, shared by build, build-many and run.

The flags are generated from the Request model: its field names give the spellings
(`work_dir` -> `--work-dir`), its types the click types and completion (Literal, or a type
whose metadata lists choices -> choices, host paths -> files, int, bool -> `--x/--no-x`) and
its descriptions the --help text, so a new field is a flag, completes and is documented the
day it is added to the model.
"""

from __future__ import annotations

import re
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
        attrs: dict[str, Any] = {"default": None, "help": brief(info.description or "")}
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


# The request's flags in --help, by topic; a field no topic names is listed under the last.
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "What to run",
        (
            "workflow_type", "test_cmd", "eval_cmd", "bench_cmd", "custom_cmd", "custom_script",
            "custom_env", "perf_config_yaml", "perf_test_name", "test_timeout", "model_name",
        ),
    ),
    (
        "Where it runs",
        (
            "execution_scenario", "work_dir", "repo_root", "partition", "account",
            "slurm_env_file", "time_limit", "remote_repo_path", "remote_work_dir", "env_check",
            "persistent_mode", "mpi_plugin",
        ),
    ),
    ("GPUs and nodes", ("required_devices", "node_count", "gpus_per_node", "device_type")),
    (
        "Image, models and install",
        (
            "container_image", "sqsh_cache_dir", "llm_models_root", "checkpoint_path",
            "models_path", "skip_install", "wheel",
        ),
    ),
    (
        "Compile the checkout first (docs/compile.md)",
        ("compile", "cuda_arch", "use_ccache", "benchmarks", "nvtx", "wheel_dir"),
    ),
    ("Other request fields", ()),
)  # fmt: skip


def brief(description: str) -> str:
    """A field's description for --help: its first clause, without asides in parentheses
    (`schema request` keeps the whole text)."""
    depth, cut = 0, len(description)
    for i, ch in enumerate(description):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and description.startswith("; ", i):
            cut = i
            break
    text = description[:cut]
    while (shorter := re.sub(r"\s*\([^()]*\)", "", text)) != text:
        text = shorter
    return text


def field_options(f: Any) -> Any:
    """Decorator: add every request field's flag to a command function, in the model's order."""
    for decls, attrs in reversed(field_specs()):
        f = click.option(*decls, **attrs)(f)
    return f


class TopicHelp(click.Command):
    """--help of a command that takes the request's flags: its own options, then the flags by
    topic."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command's own options first, then the request's flags by topic."""
        from trtllm_script_builder.model.request import Request

        own: list[tuple[str, str]] = []
        fields: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or not isinstance(param, click.Option):
                continue
            if param.name in Request.model_fields:
                fields[param.name] = record
            else:
                own.append(record)
        with formatter.section("Options"):
            formatter.write_dl(own)
        for title, names in TOPICS:
            rows = [fields.pop(n) for n in names if n in fields] if names else [*fields.values()]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        formatter.write_paragraph()
        formatter.write_text(
            "Each flag sets the request field of its name and wins over the file; "
            "`trtllm-script-builder schema request` describes every field in full."
        )


class FieldsCommand(TopicHelp):
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
