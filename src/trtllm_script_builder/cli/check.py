"""`trtllm-script-builder check WORK_DIR`: the click command (added to the CLI by cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trtllm_script_builder.process.check import check_job


@click.command("check")
@click.argument("work_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print {ok, problems, cluster, host} as JSON."
)
@click.option(
    "--ssh-host",
    default=None,
    metavar="HOST",
    help="a job on a remote cluster: check on this host (default: job_spec ssh_host, else "
    "slurm_env's)",
)
def command(work_dir: Path, as_json: bool, ssh_host: str | None) -> None:
    """Check the job built in WORK_DIR against the live cluster before submitting it.

    Runs `sbatch --test-only` on the script and checks partition, account, GRES, node count,
    time limit and MPI plugin; reports every problem at once, quoting the cluster's reasons.
    A job on a remote cluster is checked there over ssh (the script goes to sbatch on
    standard input; nothing is copied). A Docker job: docker answers and nvidia-smi
    lists the GPUs it needs. Says which cluster (and host) it checked.
    Exit status: 0 fine, 1 problems found, 2 nothing built in WORK_DIR, 3 the remote host could
    not be reached.

    \b
    Example:
      trtllm-script-builder build req.yaml && trtllm-script-builder check /path/to/work_dir
    """
    from trtllm_script_builder.cli import fail
    from trtllm_script_builder.errors import BuildError

    try:
        found = check_job(work_dir, ssh_host=ssh_host)
    except BuildError as err:
        fail(err)
        return
    if as_json:
        data = {
            "ok": found.rc == 0,
            "problems": found.problems,
            "cluster": found.cluster,
            "host": found.host,
        }
        click.echo(json.dumps(data, indent=2))
    elif found.problems:
        for problem in found.problems:
            click.echo(f"problem: {problem}")
        click.echo(f"{len(found.problems)} problem(s) in {work_dir} on {found.where}", err=True)
    else:
        click.echo(f"ok: {work_dir} fits {found.where}")
    raise SystemExit(found.rc)


commands = [command]
