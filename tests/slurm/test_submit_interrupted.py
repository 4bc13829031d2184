"""An interrupted `submit` leaves nothing running that it has no record of
(decision interrupted-submit-undone).

`submit` (one job, and a build-many batch) is stopped by SIGTERM, SIGINT and SIGHUP after
its sbatch calls succeeded and before its records were written (stopped by the test suite's
`tests/interrupt_at.py` where the records' block begins):
every job it submitted is cancelled in the live cluster and the folder is as it was (no
submission.json, no batch_submission.json, no temporary).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import make_repo
from tests.slurm.test_submit_watch import probed_env, sacct_state, write_request
from tests.test_atomic_sets import paused, temps, tree

if TYPE_CHECKING:
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm


def jobs_named(name: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, check=False
    ).stdout
    return out.split()


def interrupted(args: list[str]) -> subprocess.Popen[str]:
    """Paused after its sbatch calls, before the block that writes its records."""
    # one job and a batch write their records alike, in the one submit path
    return paused(args, "trtllm_script_builder.atomic.signals_held")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_an_interrupted_submit_cancels_its_job(
    slurm_cluster: SlurmCluster, tmp_path: Path, sig: int
) -> None:
    repo = make_repo(tmp_path / "repo")
    name = f"tsbint{int(sig)}"
    req = write_request(
        tmp_path, "job", repo, probed_env(tmp_path), custom_cmd="sleep 120", model_name=name
    )
    build = subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", "build", str(req)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    work = tmp_path / "job"
    before = tree(work)
    p = interrupted(["submit", str(work)])
    jobs = jobs_named(f"{name}_custom")
    try:
        assert len(jobs) == 1  # it was submitted
        p.send_signal(sig)
        p.communicate(timeout=60)
        assert p.returncode == (130 if sig == signal.SIGINT else -sig)
        assert sacct_state(jobs[0]) == "CANCELLED"
        # what the job wrote if it started before it was cancelled is its own (its logs)
        logs = re.compile(rf"{name}_custom_{jobs[0]}\.(out|err)")
        # the folder's submit lock stays (decision one-submit-per-folder)
        after = {
            k: v for k, v in tree(work).items() if not logs.fullmatch(k) and k != ".submit.lock"
        }
        assert after == before, sorted(set(after) ^ set(before))
        assert not temps(after)
    finally:
        subprocess.run(["scancel", *jobs], check=False)


def test_an_interrupted_batch_submit_cancels_every_array(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = probed_env(tmp_path)
    base = write_request(tmp_path, "base", repo, env, custom_cmd="sleep 120")
    fields = json.loads(base.read_text())
    fields.pop("work_dir")
    fields.pop("custom_cmd")
    base.write_text(json.dumps(fields))
    listing = tmp_path / "list.yaml"
    items = [
        {"custom_cmd": "sleep 120", "model_name": "tsbbatchint"},
        {"custom_cmd": "sleep 121", "model_name": "tsbbatchint"},
    ]
    listing.write_text(json.dumps(items))
    batch = tmp_path / "batch"
    built = subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", "build-many", str(listing),
         "--base", str(base), "--work-dir", str(batch)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    before = tree(batch)
    p = interrupted(["submit", str(batch)])
    deadline = time.monotonic() + 10
    jobs: list[str] = []
    while not jobs and time.monotonic() < deadline:
        jobs = jobs_named("tsbbatchint_custom")
    try:
        assert jobs
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
        assert p.returncode == -signal.SIGTERM
        assert {sacct_state(j.split("_")[0]) for j in jobs} == {"CANCELLED"}
        after = tree(batch)
        new = sorted(set(after) - set(before))
        # the array's driver script stays (it is what was submitted), and the logs of a task
        # that started before it was cancelled; no record, no temporary
        assert all(
            re.fullmatch(r"batch_array\d+\.slurm|.*_\d+(_\d+)?\.(out|err)|\.submit\.lock", n)
            for n in new
        ), new
        assert not [n for n in new if n.endswith(".json")]
        assert {k: v for k, v in after.items() if k not in new} == before
        assert not temps(after)
    finally:
        subprocess.run(["scancel", *{j.split("_")[0] for j in jobs}], check=False)
