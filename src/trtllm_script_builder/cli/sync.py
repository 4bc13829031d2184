"""`trtllm-script-builder sync WORK_DIR`: the click command (loaded lazily by the CLI group)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trtllm_script_builder.cli import fail, say
from trtllm_script_builder.errors import BuildError


@click.command("sync")
@click.argument("work_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--ssh-host",
    default=None,
    metavar="HOST",
    help="ssh to this host (default: job_spec ssh_host, else slurm_env's)",
)
@click.option(
    "--force",
    is_flag=True,
    help="discard changes the cluster checkout has of its own (checkout -f, git clean -fd; "
    "ignored files such as build output stay)",
)
@click.option(
    "--submodules/--no-submodules",
    default=True,
    show_default=True,
    help="run `git submodule update --init --recursive` on the cluster after the checkout",
)
@click.option("--json", "as_json", is_flag=True, help="print {commit, method, snapshot, notes}")
def command(
    work_dir: Path, ssh_host: str | None, force: bool, submodules: bool, as_json: bool
) -> None:
    """Bring the checkout the job in WORK_DIR was built from (repo_root) to the cluster's
    clone (remote_repo_path) and print the commit now checked out there.

    Everything the checkout holds travels: commits, staged, unstaged and untracked files
    that .gitignore does not exclude, as one snapshot commit (HEAD itself when nothing is
    uncommitted). Your index, working tree, branches and stash are not touched. The commit
    goes as a temporary branch on the shared origin when the cluster clone's origin is one
    of your remotes, else as a git bundle over ssh; a missing remote_repo_path is cloned.
    The cluster checkout ends detached at that commit; one with changes of its own is
    refused unless --force. `work_dirs/` (the tool's job folders) neither travels nor counts
    as a change, and a remote_repo_path that is this very checkout (a shared file system) is
    left as it is (method `shared`).

    \b
    Example:
      trtllm-script-builder build req.yaml && trtllm-script-builder sync work_dirs/llama_20260101

    Exit status: 0 synced, 2 refused (the job names no cluster clone, the cluster checkout
    has changes), 3 git or ssh failed.
    """
    from trtllm_script_builder.process.gitsync import sync_checkout
    from trtllm_script_builder.process.spec_file import read_job_spec
    from trtllm_script_builder.resolve.backend import backend_of, scenarios_where

    try:
        spec = read_job_spec(work_dir)
        if not spec.remote_repo_path:
            remote = scenarios_where(lambda b, s: s in b.over_ssh)
            raise BuildError(
                "remote_repo_path",
                "job_spec.json has no remote_repo_path",
                f"build the job for {remote} (remote_repo_path names the cluster's clone)",
            )
        result = sync_checkout(
            backend_of(spec.execution_scenario).host(spec, ssh_host),
            Path(spec.repo_root),
            spec.remote_repo_path,
            force=force,
            submodules=submodules,
            say=say,
        )
    except BuildError as err:
        fail(err)
    if as_json:
        data = {
            "commit": result.commit,
            "method": result.method,
            "snapshot": result.snapshot,
            "notes": list(result.notes),
        }
        click.echo(json.dumps(data, indent=2))
    else:
        for note in result.notes:
            say(f"note: {note}")
        click.echo(result.commit)


commands = [command]
