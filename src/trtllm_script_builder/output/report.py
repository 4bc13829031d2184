"""The Step 6 report: what was built, for people.

`render_report` is the plain text (pipes, files, tests); `print_report` picks: on a terminal
the same lines in colour through rich (imported only then), else the plain text. `NO_COLOR`
turns the colour off.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

from trtllm_script_builder.model.jobspec import CATEGORY_TITLES, JobSpec
from trtllm_script_builder.resolve.backend import backend_of


def report_rows(spec: JobSpec, files: list[str], work_dir: Path) -> list[tuple[str, str]]:
    s = spec
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    rows = [
        ("Generated", f"{', '.join(files)} in {work_dir}"),
        ("Script", s.script_path),
        ("Workflow", f"{s.workflow_type} (category {s.category}: {CATEGORY_TITLES[s.category]})"),
        ("Model", s.model_name),
        ("Docker image", s.container_image),
        ("Devices", f"{plural(s.required_devices, 'GPU')} across {plural(s.node_count, 'node')}"),
    ]
    if s.slurm_params:
        p = s.slurm_params
        # pytest and custom scripts never start MPI, eval always does, bench across GPUs.
        uses_mpi = s.category in (4, 5) or (s.category == 6 and p.ntasks > 1)
        rows.append(
            (
                "Slurm",
                f"partition {p.partition}, account {p.account}, time {p.time_limit}, gres {p.gres or 'none'}"
                + (f", mpi {p.mpi_plugin}" if uses_mpi else ""),
            )
        )
    # Warnings are not rows: they go to stderr, before the report (decision warnings-to-stderr).
    if s.category == 1:
        run = f"bash {s.script_path}"
    elif s.remote_script_path or s.prerequisites:  # submit copies the files / chains the jobs
        run = f"trtllm-script-builder submit {work_dir}"
    else:
        run = f"sbatch {s.script_path}"
    rows.append(("Run", run))
    rows += next_steps(s, work_dir)
    return rows


def next_steps(spec: JobSpec, work_dir: Path) -> list[tuple[str, str]]:
    """check -> submit -> watch for this job; a shell comment says what each does here, so
    every line still copies whole into a shell."""
    tool = "trtllm-script-builder"
    quoted = shlex.quote(str(work_dir))
    check, submit = backend_of(spec.execution_scenario).steps(spec)
    return [
        ("Check", f"{tool} check {quoted}  # {check}"),
        ("Submit", f"{tool} submit {quoted}  # {submit}"),
        ("Watch", f"{tool} watch {quoted}  # follow it to a verdict"),
    ]


def render_report(spec: JobSpec, files: list[str], work_dir: Path) -> str:
    return "".join(
        f"{label + ':':<14}{value}\n" for label, value in report_rows(spec, files, work_dir)
    )


# Styles per row label on a terminal (rich style strings); unlisted rows are plain.
STYLES = {
    "Generated": "green",
    "Script": "bold",
    "Run": "bold cyan",
    "Check": "cyan",
    "Submit": "cyan",
    "Watch": "cyan",
}
LABEL_WIDTH = 14


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or odd stream is no terminal
        return False


def terminal_console(stream: TextIO) -> Any:
    """A rich Console writing to `stream`: no markup, no guessing at highlights, no re-wrapping
    (long paths and commands stay one line, so they copy whole); a non-empty NO_COLOR drops
    the colour (bold stays)."""
    import os

    from rich.console import Console

    return Console(
        file=stream,
        force_terminal=True,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
        no_color=bool(os.environ.get("NO_COLOR")) or None,
    )


def print_report(
    spec: JobSpec, files: list[str], work_dir: Path, stream: TextIO | None = None
) -> None:
    """Print the report to `stream` (standard output by default): rich on a terminal."""
    out = stream if stream is not None else sys.stdout
    if not is_terminal(out):
        out.write(render_report(spec, files, work_dir))
        out.flush()
        return
    from rich.text import Text

    console = terminal_console(out)
    for label, value in report_rows(spec, files, work_dir):
        style = STYLES.get(label, "")
        console.print(
            Text.assemble((f"{label + ':':<{LABEL_WIDTH}}", f"bold {style}"), (value, style))
        )
