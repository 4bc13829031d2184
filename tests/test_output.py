"""Output for people: colour through rich on a terminal, the plain text everywhere else.

The plain text is what the other tests compare; here: a terminal (a forced one and a real
pty) gets the same lines in colour, NO_COLOR drops the colour, and rich is imported only
when something is printed to a terminal.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.output.report import print_report, render_report
from trtllm_script_builder.process.probe.render import print_text, render_text

from .conftest import SLURM_ENV

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
GOLDEN_SPEC = ROOT / "tests" / "golden" / "cat2_pytest_local_slurm" / "job_spec.json"
SGR = re.compile(r"\x1b\[([0-9;]*)m")


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a tty would."""

    def isatty(self) -> bool:
        return True


def spec() -> JobSpec:
    data = json.loads(GOLDEN_SPEC.read_text())
    data["warnings"] = ["a [bold]warning[/] with [brackets] that is not markup"]
    return JobSpec.model_validate(data)


def plain(text: str) -> str:
    return SGR.sub("", text)


def colours(text: str) -> set[str]:
    """The colour parameters (30-39, 90-97, 38;..) among the SGR codes in `text`."""
    found: set[str] = set()
    for params in SGR.findall(text):
        for p in params.split(";"):
            if p and (30 <= int(p) <= 39 or 90 <= int(p) <= 97):
                found.add(p)
    return found


@pytest.fixture()
def no_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


def test_report_to_a_pipe_is_the_plain_text() -> None:
    out = io.StringIO()
    print_report(spec(), ["x.slurm", "job_spec.json"], Path("/w"), out)
    assert out.getvalue() == render_report(spec(), ["x.slurm", "job_spec.json"], Path("/w"))
    assert "\x1b" not in out.getvalue()


def test_report_on_a_terminal_is_the_same_lines_in_colour(no_no_color: None) -> None:
    out = Terminal()
    print_report(spec(), ["x.slurm", "job_spec.json"], Path("/w"), out)
    assert colours(out.getvalue()), "no colour on a terminal"
    # Same text: nothing re-wrapped, nothing read as markup.
    assert plain(out.getvalue()) == render_report(spec(), ["x.slurm", "job_spec.json"], Path("/w"))


def test_no_color_turns_the_colour_off(monkeypatch: pytest.MonkeyPatch, no_no_color: None) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = Terminal()
    print_report(spec(), ["x.slurm"], Path("/w"), out)
    assert colours(out.getvalue()) == set()
    assert plain(out.getvalue()) == render_report(spec(), ["x.slurm"], Path("/w"))
    table = Terminal()
    print_text(SLURM_ENV, table)
    assert colours(table.getvalue()) == set()


def test_probe_table_to_a_pipe_is_the_plain_text() -> None:
    out = io.StringIO()
    print_text(SLURM_ENV, out)
    assert out.getvalue() == render_text(SLURM_ENV)


def test_probe_table_on_a_terminal(no_no_color: None) -> None:
    env = {**SLURM_ENV, "errors": ["partition x: could not determine Arch"]}
    out = Terminal()
    print_text(env, out)
    text = out.getvalue()
    assert colours(text)
    shown = [ln.rstrip() for ln in plain(text).splitlines()]
    expected = render_text(env).splitlines()
    assert shown == expected  # the same table, cell for cell


def test_probe_table_without_partitions_on_a_terminal(no_no_color: None) -> None:
    out = Terminal()
    print_text({**SLURM_ENV, "partitions": []}, out)
    assert "(no partitions)" in plain(out.getvalue())


def _run_in_pty(code: str, env: dict[str, str]) -> str:
    """Run python code with its standard output on a real pseudo-terminal; return the output."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=slave,
        stderr=subprocess.PIPE,
        env={**env, "PYTHONPATH": str(SRC)},
        cwd=ROOT,
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return b"".join(chunks).decode().replace("\r\n", "\n")


REPORT_CODE = f"""
import json, sys
from pathlib import Path
import trtllm_script_builder.backends  # the report asks the job's backend
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.output.report import print_report
assert "rich" not in sys.modules
spec = JobSpec.model_validate(json.loads(Path({str(GOLDEN_SPEC)!r}).read_text()))
print_report(spec, ["x.slurm"], Path("/w"))
"""


def test_report_on_a_real_terminal(no_no_color: None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    out = _run_in_pty(REPORT_CODE, {**env, "TERM": "xterm-256color", "COLUMNS": "60"})
    assert colours(out)
    spec_ = JobSpec.model_validate(json.loads(GOLDEN_SPEC.read_text()))
    # Long lines stay whole on a narrow terminal (the terminal wraps them, not rich).
    assert plain(out) == render_report(spec_, ["x.slurm"], Path("/w"))
    out = _run_in_pty(REPORT_CODE, {**env, "TERM": "xterm-256color", "NO_COLOR": "1"})
    assert not colours(out)


def test_the_cli_starts_without_rich_or_pydantic() -> None:
    code = (
        "import sys\n"
        "from trtllm_script_builder.cli import main\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pydantic', 'jsonschema'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert done.returncode == 0, done.stderr


def test_a_build_into_a_pipe_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    """Not rich (no terminal), nor any module of another command (decision lazy-imports: imports
    kept lazy)."""
    others = ["probe", "check", "runner", "schema", "completion", "batch"]
    code = (
        "import sys\n"
        "from trtllm_script_builder.cli import main\n"
        "try:\n"
        "    main(['build', 'examples/requests/pytest_local_slurm.yaml', '--work-dir', sys.argv[1]])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        f"others = {others!r}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'jsonschema')\n"
        "             or m.split('.')[:2] in [['trtllm_script_builder', o] for o in others])\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "w")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(SRC), "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert "Generated:" in done.stdout and "\x1b" not in done.stdout


def test_the_build_report_on_a_real_terminal(tmp_path: Path, no_no_color: None) -> None:
    if "print_report" not in (SRC / "trtllm_script_builder" / "cli" / "__init__.py").read_text():
        pytest.skip("cli.py does not call report.print_report yet")
    code = (
        "import sys\n"
        "from trtllm_script_builder.cli import main\n"
        f"main(['build', 'examples/requests/pytest_local_docker.yaml', '--work-dir', {str(tmp_path / 'w')!r}])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    out = _run_in_pty(code, {**env, "TERM": "xterm-256color", "HOME": str(tmp_path)})
    assert colours(out)
    assert plain(out).startswith("Generated:")


@pytest.mark.parametrize(
    ("golden", "run", "check", "submit"),
    [
        ("cat2_pytest_local_slurm", "sbatch ", "sbatch --test-only on this cluster", "# sbatch"),
        (
            "cat1_pytest_local_docker",
            "bash ",
            "docker answers, nvidia-smi lists the GPUs",
            "# bash docker_cmd.sh in the background",
        ),
        (
            "cat6_bench_remote_slurm",
            "trtllm-script-builder submit ",
            "sbatch --test-only on ",
            ", sbatch there",
        ),
    ],
)
def test_warnings_are_no_report_rows_and_the_next_steps_fit_the_scenario(
    golden: str, run: str, check: str, submit: str, tmp_path: Path
) -> None:
    data = json.loads((ROOT / "tests" / "golden" / golden / "job_spec.json").read_text())
    data["warnings"] = ["first", "second"]
    job = JobSpec.model_validate(data)
    work = tmp_path / "my work"
    labels = [line.split(":", 1)[0] for line in render_report(job, ["x"], work).splitlines()]
    assert labels[-5:] == [
        "Slurm" if job.slurm_params else "Devices",
        "Run",
        "Check",
        "Submit",
        "Watch",
    ]
    rows = dict(line.split(":", 1) for line in render_report(job, ["x"], work).splitlines()[-4:])
    assert rows["Run"].strip().startswith(run)
    quoted = f"'{work}'"  # a folder with a blank is quoted: each line copies into a shell
    assert rows["Check"].strip().startswith(f"trtllm-script-builder check {quoted}  # {check}")
    assert rows["Submit"].strip().startswith(f"trtllm-script-builder submit {quoted}  #")
    assert rows["Submit"].strip().endswith(submit)
    assert (
        rows["Watch"].strip() == f"trtllm-script-builder watch {quoted}  # follow it to a verdict"
    )
    if golden.endswith("remote_slurm"):
        host, remote = data.get("ssh_host"), data["remote_work_dir"]
        assert f"on {host}" in rows["Check"] and f"copy to {host}:{remote}," in rows["Submit"]
