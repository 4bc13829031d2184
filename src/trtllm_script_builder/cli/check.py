"""`trtllm-script-builder check WORK_DIR`: the click command (added to the CLI by cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trtllm_script_builder.process.check.core import check


@click.command("check")
@click.argument("work_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print {ok, problems} as JSON.")
def command(work_dir: Path, as_json: bool) -> None:
    """Check the job built in WORK_DIR against the live cluster before submitting it.

    Runs `sbatch --test-only` on the script and checks partition, account, GRES, node count,
    time limit and MPI plugin; reports every problem at once, quoting the cluster's reasons.
    Exit status: 0 fine, 1 problems found.

    \b
    Example:
      trtllm-script-builder build req.yaml && trtllm-script-builder check /path/to/work_dir
    """
    problems, rc = check(work_dir)
    if as_json:
        click.echo(json.dumps({"ok": rc == 0, "problems": problems}, indent=2))
    elif problems:
        for problem in problems:
            click.echo(f"problem: {problem}")
        click.echo(f"{len(problems)} problem(s) in {work_dir}", err=True)
    else:
        where = "this machine (docker, GPUs)" if _docker(work_dir) else "the cluster"
        click.echo(f"ok: {work_dir} fits {where}")
    raise SystemExit(rc)


def _docker(work_dir: Path) -> bool:
    try:
        return json.loads((work_dir / "job_spec.json").read_text()).get("category") == 1
    except (OSError, ValueError, AttributeError):
        return False


commands = [command]
