"""A pending array task cancelled on its own, after which the array's record starts the array's
other pending task, is left with no record in squeue, sacct or scontrol; watch's status query
takes it as cancelled at once (decision array-task-removed). Real sbatch and scancel."""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING

import pytest

from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.proc import run

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm


def _state(task: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", task, "-o", "%T"], capture_output=True, text=True
    ).stdout
    return out.strip()


def _until(check: object, what: str, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_task_cancelled_before_the_arrays_record_started_another_is_cancelled(
    slurm_cluster: SlurmCluster,
) -> None:
    array = (
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "-p",
                slurm_cluster.cpu_partition,
                "-A",
                slurm_cluster.account,
                "--array=0-2%1",
                "-t",
                "5",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 300",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .split(";")[0]
    )
    tasks = [f"{array}_{n}" for n in range(3)]
    try:
        _until(lambda: _state(tasks[0]) == "RUNNING", "the first task did not start")
        subprocess.run(["scancel", tasks[0], tasks[2]], check=True)
        _until(lambda: _state(tasks[1]) == "RUNNING", "the second task did not start")
        subprocess.run(["scancel", tasks[1]], check=True)
        # no tool knows the third task any more
        assert run(["scontrol", "show", "job", "-o", tasks[2]]).out.strip() == (
            f"Job {tasks[2]} not found"
        )
        deadline = time.monotonic() + 60
        while True:  # until accounting has the array's rows
            got = slurm.query_many(run, tasks, accounting=True)
            if all(got[t].terminal for t in tasks) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [got[t].state for t in tasks] == ["CANCELLED"] * 3, got
        assert got[tasks[2]].reason == slurm.REMOVED
        assert got[tasks[1]].raw_id == array  # the task that took the array's record
    finally:
        subprocess.run(["scancel", array], check=False)
