"""`trtllm-script-builder probe`: the click command (added to the CLI by cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from trtllm_script_builder.atomic import write_file
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
    if remote_cwd is not None and ssh_host is None:
        raise click.UsageError("--remote-cwd needs --ssh HOST")
    if ssh_host is None:
        env, rc = probe(names)
    else:
        env, rc = _probe_remote(ssh_host, names, remote_cwd)
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


def _probe_remote(
    host: str, names: list[str] | None, remote_cwd: str | None
) -> tuple[dict[str, Any], int]:
    from trtllm_script_builder.model import values
    from trtllm_script_builder.process.probe.collect import NOT_A_NAME
    from trtllm_script_builder.process.ssh import SshRunner, SshTarget

    runner = SshRunner(SshTarget(host))
    hello = runner.shell('pwd && printf "%s\\n" "$HOME" && id -un')
    words = hello.out.splitlines()
    if hello.rc != 0 or len(words) < 3:
        why = (hello.err or hello.out).strip().splitlines()
        said = values.printable(why[-1]) if why else f"exit status {hello.rc}"
        click.echo(f"error: ssh {host}: {said}", err=True)
        raise SystemExit(3)
    login_dir, home, user = words[0], words[1], words[2]
    if not values.SLURM_NAME.fullmatch(user):
        # the user goes to sacctmgr as an argument of its own (decision 75)
        click.echo(
            f"error: ssh {host}: id -un answered {values.shown(user)}, which {NOT_A_NAME}", err=True
        )
        raise SystemExit(3)
    env, rc = probe(names, runner=runner, user=user)
    env["ssh_host"] = host
    # the login shell's answers are kept only as the cluster file is read back (decision 75)
    for key, value in (("remote_cwd", remote_cwd or login_dir), ("remote_home", home)):
        if values.is_absolute_path(value) and values.text_problem(value) is None:
            env[key] = value
        else:
            env["errors"].append(f"{key} {values.shown(value)} left out: not an absolute path")
            env[key] = None
            rc = rc or 2
    return env, rc


commands = [command]
