"""The `build-many` command: the click side of batch building."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trtllm_script_builder.batch import Target, build_many
from trtllm_script_builder.cli import fail
from trtllm_script_builder.cli.flags import TopicHelp, field_options
from trtllm_script_builder.errors import BuildError


@click.command("build-many", cls=TopicHelp)
@click.argument(
    "test_list", metavar="LIST", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--base",
    "base_file",
    type=click.Path(),
    default=None,
    help="a request file with the fields every job shares",
)
@click.option(
    "--group-by",
    type=click.Choice(["devices"]),
    default=None,
    help="one job per GPU count, its tests in one pytest call",
)
@click.option(
    "--gpu-type",
    default=None,
    metavar="NAME",
    help="test-db files: only the blocks whose `gpu` wildcards match NAME (h100, gb200)",
)
@click.option(
    "--gpu-count",
    type=click.IntRange(min=1, max=4096),
    default=None,
    help="test-db files: only the blocks whose system_gpu_count range holds this count",
)
@click.option(
    "--force", is_flag=True, help="build into a work_dir that is not empty (earlier jobs replaced)"
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="build every entry in memory and print what would be built; write nothing",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="end standard output with one JSON line: the totals and the rows of jobs.json",
)
@field_options
def build_many_command(
    test_list: Path,
    base_file: str | None,
    group_by: str | None,
    gpu_type: str | None,
    gpu_count: int | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    **fields: Any,
) -> None:
    """Build one job per entry of LIST into its own folder under work_dir.

    LIST is a test list (one pytest id per line, relative to tests/integration/defs, an optional
    ` TIMEOUT (N)` in minutes, `#` comments), a TensorRT-LLM test-db YAML file (each line built
    as CI runs it, on its block's GPU count; --gpu-type/--gpu-count choose the blocks), or a
    YAML list of requests. The shared fields come from --base and the field flags; work_dir must be new or
    empty. Each job's folder is named after its test (or its request's model), with a suffix
    when two entries would share one. Writes `jobs.json` (every job with its sizing) and prints
    a summary; exit 0 when every entry was built, 2 otherwise. --dry-run checks every entry the
    same way and writes nothing.

    \b
    Example:
      trtllm-script-builder build-many tests/integration/test_lists/qa/llm_function_sanity.txt \\
        --base req.yaml --work-dir /tmp/sanity
    """
    from trtllm_script_builder.model.request import parse_flag_values, read_request_file

    try:
        fields = parse_flag_values(fields)
        base, base_dir = read_request_file(base_file) if base_file else ({}, Path.cwd())
        base.pop("test_cmd", None)
        code = build_many(
            test_list,
            base,
            base_dir,
            fields,
            group_by,
            sys.stdout,
            sys.stderr,
            force,
            dry_run=dry_run,
            as_json=as_json,
            target=Target(gpu_type, gpu_count),
        )
    except BuildError as error:
        fail(error)
    sys.exit(code)


commands = [build_many_command]
