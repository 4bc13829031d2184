"""The `report` command: the click side of output/report_html.py."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_script_builder.cli import fail
from trtllm_script_builder.errors import BuildError


@click.command("report")
@click.argument("dir", metavar="DIR", type=click.Path(path_type=Path))
def report_command(dir: Path) -> None:
    """Write DIR/report.html: the verdicts of a job folder or a build-many batch, for people.

    DIR is a job folder (judged by `watch`, or only built), or a batch folder with
    build-many's jobs.json (each job's verdict.json is read from its folder). A job not
    submitted yet shows as NOT_SUBMITTED, one submitted but not watched as NOT_WATCHED. One
    self-contained page: a summary per verdict, the jobs with their logs and evidence, failing
    and skipped tests, eval scores, and a chart of the bench figures. Prints the page's path.

    \b
    Example:
      trtllm-script-builder report /tmp/sanity && xdg-open /tmp/sanity/report.html
    """
    from trtllm_script_builder.output.report_html import write_report

    try:
        path = write_report(dir)
    except BuildError as error:
        fail(error)
    click.echo(str(path))


commands = [report_command]
