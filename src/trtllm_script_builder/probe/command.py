"""`trtllm-script-builder probe`: the click command (added to the CLI by cli.py)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import click

from .collect import probe
from .render import render_text


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@click.command("probe")
@click.option(
    "--partitions",
    metavar="P1,P2",
    default=None,
    help="Probe the hardware of these partitions only (default: every partition that is up).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "text"]),
    default="json",
    show_default=True,
    help="json: slurm_env.json; text: a table.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file (e.g. WORK_DIR/slurm_env.json) instead of standard output.",
)
def command(partitions: str | None, fmt: str, output: Path | None) -> None:
    """Read the cluster (sacctmgr, sinfo, scontrol, srun --mpi=list, sbatch --test-only).

    Exit status: 0 clean, 1 no Slurm client tools, 2 partial (see "errors").
    """
    names: list[str] | None = None
    if partitions is not None:
        names = [p.strip() for p in partitions.split(",") if p.strip()]
        if not names:
            raise click.UsageError("--partitions needs at least one partition name")
    env, rc = probe(names)
    text = json.dumps(env, indent=2) + "\n" if fmt == "json" else render_text(env)
    if output is not None:
        write_atomically(output, text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
    if output is not None or fmt == "json":
        for error in env["errors"]:
            click.echo(f"warning: {error}", err=True)
    raise SystemExit(rc)
