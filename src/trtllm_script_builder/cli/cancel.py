"""`cancel`: the click command (loaded lazily by the CLI group)."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_script_builder.cli import fail
from trtllm_script_builder.errors import BuildError


@click.command("cancel")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--ssh-host", default=None, metavar="HOST", help="a remote Slurm job: ssh to this host"
)
def cancel(folder: Path, ssh_host: str | None) -> None:
    """Cancel what `submit` started from FOLDER: a job with the compile and import jobs it
    submitted, or every job of a build-many folder; one line per job says what was cancelled
    and what had already ended.

    Slurm jobs get one scancel on the host they run on; a Docker job or a job in a held
    allocation is stopped only while its pid is still the process submit started. A compile
    shared with other jobs is left running, and a held allocation is kept (`release` ends it).

    \b
    Example:
      trtllm-script-builder cancel work_dirs/llama_20260101

    \b
    Exit status: 0 cancelled (or everything had ended), 2 nothing submitted from FOLDER,
    3 a tool failed (scancel, ssh).
    """
    from trtllm_script_builder.process.cancel import cancel as do_cancel

    try:
        done = do_cancel(folder, ssh_host=ssh_host)
    except BuildError as err:
        fail(err)
        return
    from trtllm_script_builder.model.values import printable

    for line in done.lines():  # job states are Slurm's words: shown, never obeyed
        click.echo(printable(line, None))


commands = [cancel]
