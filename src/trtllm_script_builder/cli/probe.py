"""`trtllm-script-builder probe`: the click command (added to the CLI by cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trtllm_script_builder.atomic import write_file
from trtllm_script_builder.cli import fail
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process.host import host_for
from trtllm_script_builder.process.probe.collect import probe
from trtllm_script_builder.process.probe.render import render_text


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
@click.option(
    "--ssh",
    "ssh_host",
    metavar="HOST",
    default=None,
    help="Probe a remote cluster: run the same tools through `ssh HOST` (OpenSSH, BatchMode, "
    "one ControlMaster connection) and record ssh_host and remote_cwd.",
)
@click.option(
    "--remote-cwd",
    metavar="DIR",
    default=None,
    help="With --ssh: the remote_cwd to record (default: the login directory, `pwd`).",
)
def command(
    partitions: str | None,
    fmt: str,
    output: Path | None,
    ssh_host: str | None,
    remote_cwd: str | None,
) -> None:
    """Read the cluster (sacctmgr, sinfo, scontrol, srun --mpi=list, sbatch --test-only).

    \b
    Example:
      trtllm-script-builder probe --output work_dirs/slurm_env.json
      trtllm-script-builder probe --ssh login.cluster.example.com -o slurm_env_remote.json

    Exit status: 0 clean, 1 no Slurm client tools, 2 partial (see "errors"),
    3 --ssh could not connect.
    """
    names: list[str] | None = None
    if partitions is not None:
        names = [p.strip() for p in partitions.split(",") if p.strip()]
        if not names:
            raise click.UsageError("--partitions needs at least one partition name")
    if remote_cwd is not None and not ssh_host:
        raise click.UsageError("--remote-cwd needs --ssh HOST")
    try:
        env, rc = probe(names, host_for(ssh_host), remote_cwd=remote_cwd)
    except BuildError as err:
        fail(err)
    text = json.dumps(env, indent=2) + "\n" if fmt == "json" else render_text(env)
    if output is not None:
        write_file(output, text)
        click.echo(f"wrote {output}", err=True)
    elif fmt == "text":
        from trtllm_script_builder.process.probe.render import print_text

        print_text(env)
    else:
        click.echo(text, nl=False)
    if output is not None or fmt == "json":
        for error in env["errors"]:
            click.echo(f"warning: {error}", err=True)
    raise SystemExit(rc)


commands = [command]
