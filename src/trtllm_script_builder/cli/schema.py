"""`trtllm-script-builder schema NAME`: the JSON Schemas of the request, slurm_env.json and
job_spec.json, generated from the pydantic models (the checked-in copies live in schemas/)."""

from __future__ import annotations

import json
from typing import Any

import click

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "urn:trtllm-script-builder:schema"

# name -> (module, model class, title, description). The models are imported only when asked.
SCHEMAS: dict[str, tuple[str, str, str, str]] = {
    "request": (
        "request",
        "Request",
        "trtllm-script-builder build request",
        "The fields of a build request (a JSON or YAML file, or JSON on standard input). "
        "Relative host paths in a file are taken from the file's folder.",
    ),
    "slurm-env": (
        "slurm_env",
        "SlurmEnv",
        "slurm_env.json",
        "What probe learnt about a Slurm cluster, plus the site fields the case-executor merges "
        "in. Keys a newer probe adds are allowed.",
    ),
    "job-spec": (
        "jobspec",
        "JobSpec",
        "job_spec.json",
        "The manifest build writes next to the script: what the executors read to run the job "
        "and judge its log. Fields that do not apply to a scenario are left out.",
    ),
}
# A request or a cluster file has no version field; their schemas are versioned here and a
# change that breaks a reader bumps the number. job_spec.json carries its own schema_version.
VERSIONS = {"request": 1, "slurm-env": 1}


def schema_version(name: str) -> int:
    if name == "job-spec":
        from trtllm_script_builder.model.jobspec import SCHEMA_VERSION

        return SCHEMA_VERSION
    return VERSIONS[name]


def generate(name: str) -> dict[str, Any]:
    """The JSON Schema of one model, with $schema, a versioned $id and title."""
    from importlib import import_module

    module, cls, title, description = SCHEMAS[name]
    model = getattr(import_module(f"trtllm_script_builder.model.{module}"), cls)
    mode = "serialization" if name == "job-spec" else "validation"
    body: dict[str, Any] = model.model_json_schema(mode=mode)
    version = schema_version(name)
    if name == "job-spec":
        # Always written, and the one field a reader checks before trusting the rest.
        body["properties"]["schema_version"] = {
            "const": version,
            "description": "Bumped when a change to job_spec.json breaks a reader.",
            "title": "Schema Version",
            "type": "integer",
        }
        body["required"] = ["schema_version", *body.get("required", [])]
    head = {
        "$schema": DIALECT,
        "$id": f"{ID_BASE}:{name}:v{version}",
        "title": f"{title} (schema version {version})",
        "description": description,
    }
    return {**head, **{k: v for k, v in body.items() if k not in head}}


def render(name: str) -> str:
    """The schema as the checked-in file holds it: indented, key order kept, newline at end."""
    return json.dumps(generate(name), indent=2) + "\n"


@click.command("schema")
@click.argument("name", type=click.Choice(sorted(SCHEMAS)))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the schema to this file instead of standard output.",
)
def schema_command(name: str, output: str | None) -> None:
    """Print the JSON Schema of a request, slurm_env.json or job_spec.json.

    The schemas are generated from the models the tool itself validates with; the same
    files are checked in under schemas/ (NAME.schema.json). Use them to validate a request
    before building, or a job_spec.json before an executor reads it.

    \b
    Example:
      trtllm-script-builder schema job-spec > job-spec.schema.json
      trtllm-script-builder schema request -o schemas/request.schema.json
    """
    text = render(name)
    if output is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    from trtllm_script_builder.atomic import write_file
    from trtllm_script_builder.errors import BuildError

    out = Path(output)
    try:
        write_file(out, text)
    except OSError as exc:
        error = BuildError("output", f"cannot write {out} ({exc.strerror})", "give a writable path")
        click.echo(error.line(), err=True)
        raise SystemExit(error.exit_code) from None


commands = [schema_command]
