"""An sbatch that names no job, although slurmctld takes it (decision sbatch-without-answer).

slurmctld is stopped (SIGSTOP) while `submit` runs sbatch: the kernel still accepts the
connection and holds the request, sbatch gives up without an answer, and once slurmctld goes on
(SIGCONT) it reads the request and queues the job, as a controller too busy to answer in time
does. `submit` must find that job by its comment and cancel it, and say so.

slurmctld stops answering everyone for about 10 s: the live tests run one at a time (on one
xdist worker), and live tests submit only to the project's own test cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import make_repo
from tests.slurm.test_submit_watch import cli, probed_env, sacct_state, write_request

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

SBATCH_OF_SUBMIT = b"--comment=tsb-submit-"


def slurmctld_pid() -> int | None:
    out = subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True, text=True).stdout
    pids = out.split()
    return int(pids[0]) if len(pids) == 1 else None


def sbatch_running() -> bool:
    """Whether this process has an sbatch child carrying a submit's comment (another user of the
    machine may run sbatch too)."""
    me = str(os.getpid())
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
                parent = Path(entry.path, "stat").read_text().rpartition(")")[2].split()[1]
            except (OSError, IndexError):
                continue
            if (
                parent == me
                and Path(argv[0].decode(errors="replace")).name == "sbatch"
                and any(a.startswith(SBATCH_OF_SUBMIT) for a in argv)
            ):
                return True
    return False


def resume_once_sbatch_gave_up(pid: int, stop: threading.Event) -> None:
    """SIGCONT to slurmctld once the submit's sbatch has started and ended (or after 150 s)."""
    seen = False
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not stop.is_set():
        if sbatch_running():
            seen = True
        elif seen:
            break
        time.sleep(0.05)
    os.kill(pid, signal.SIGCONT)


def test_a_job_slurmctld_took_after_sbatch_gave_up_is_cancelled(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = slurmctld_pid()
    if pid is None:
        pytest.skip("no single slurmctld process on this machine to stop")
    try:
        os.kill(pid, 0)
    except PermissionError:
        pytest.skip("slurmctld runs as another user: this user cannot stop it")
    repo = make_repo(tmp_path / "repo")
    req = write_request(tmp_path, "late", repo, probed_env(tmp_path), custom_cmd="sleep 300")
    assert cli("build", str(req)).code == 0
    # sbatch gives up at Slurm's MessageTimeout (10 s) or, at the latest, this tool timeout
    monkeypatch.setenv("TSB_SLURM_TOOL_TIMEOUT", "40")
    stop = threading.Event()
    resumer = threading.Thread(target=resume_once_sbatch_gave_up, args=(pid, stop))
    os.kill(pid, signal.SIGSTOP)
    try:
        resumer.start()
        res = cli("submit", str(tmp_path / "late"))
    finally:
        stop.set()
        resumer.join()
        os.kill(pid, signal.SIGCONT)
    assert res.code == 3, (res.stdout, res.stderr)
    line = res.stderr.strip().splitlines()[-1]
    assert "; cancelled the 1 already submitted (job " in line, line
    assert "by this submit's comment: its sbatch named none)" in line, line
    job = line.split("(job ", 1)[1].split(" ", 1)[0]
    assert sacct_state(job, timeout=30) == "CANCELLED", job
    assert not (tmp_path / "late" / "submission.json").exists()
