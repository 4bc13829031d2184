"""Fixtures for tests against the live test cluster (`bash tests/slurm/cluster.sh up`).

Tests marked `slurm` take the `slurm_cluster` fixture: it skips them when no cluster answers,
or fails them instead when TSB_REQUIRE_SLURM=1 (CI, where cluster.sh up ran before pytest).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

STATE = Path(os.environ.get("TSB_SLURM_STATE", "/var/lib/tsb-slurm"))


@dataclass(frozen=True)
class JobResult:
    job_id: str
    state: str  # COMPLETED, FAILED, ...
    exit_code: str  # "0:0"
    output: str  # stdout and stderr of the batch script (one file)


@dataclass(frozen=True)
class SlurmCluster:
    """The cluster cluster.sh builds: names and a helper to run a batch script to its end."""

    gpu_partition: str = "gpu"  # default partition, gpunode, Gres=gpu:8, MaxTime 04:00:00
    cpu_partition: str = "cpu"  # cpunode, no GRES, MaxTime 01:00:00
    account: str = "tsb"  # root's default account
    other_account: str = "tsb2"
    # the fake pyxis plugin's default record file (FAKE_PYXIS_RECORD in the job env wins)
    record: Path = STATE / "fake_pyxis.jsonl"

    def run_job(
        self, script: Path, env: dict[str, str] | None = None, timeout: float = 90
    ) -> JobResult:
        """sbatch the script and wait for its end; its output goes to <script>.out (this
        overrides an #SBATCH --output line), `env` is added to the submitting environment."""
        out = script.with_suffix(".out")
        submit = subprocess.run(
            ["sbatch", "--parsable", f"--output={out}", str(script)],
            capture_output=True,
            text=True,
            cwd=script.parent,
            env={**os.environ, **(env or {})},
            check=False,
        )
        assert submit.returncode == 0, submit.stderr
        job_id = submit.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queued = subprocess.run(
                ["squeue", "-h", "-j", job_id], capture_output=True, text=True, check=False
            )
            if not queued.stdout.strip():
                break
            time.sleep(0.2)
        else:
            subprocess.run(["scancel", job_id], check=False)
            pytest.fail(f"job {job_id} did not finish within {timeout}s")
        show = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=False
        ).stdout
        fields = dict(f.split("=", 1) for f in show.split() if "=" in f)
        text = out.read_text() if out.exists() else ""
        return JobResult(job_id, fields.get("JobState", "?"), fields.get("ExitCode", "?"), text)


def cluster_missing() -> str | None:
    """Why the test cluster cannot be used, or None when it answers."""
    if shutil.which("sinfo") is None:
        return "Slurm client tools not installed"
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if not conf.is_file():
        return f"no Slurm config at {conf}"
    try:
        res = subprocess.run(
            ["sinfo", "-h", "-o", "%P %a"], capture_output=True, text=True, timeout=15, check=False
        )
    except subprocess.TimeoutExpired:
        return "sinfo does not answer"
    if res.returncode != 0:
        return f"sinfo failed: {res.stderr.strip()}"
    parts = {line.split()[0].rstrip("*") for line in res.stdout.splitlines() if line.strip()}
    if not {"gpu", "cpu"} <= parts:
        return f"not the tests/slurm/cluster.sh cluster (partitions: {sorted(parts)})"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    reason = cluster_missing()
    if reason is not None:
        if os.environ.get("TSB_REQUIRE_SLURM") == "1":
            pytest.fail(f"TSB_REQUIRE_SLURM=1 but no test cluster: {reason}")
        pytest.skip(f"no test cluster ({reason}); run: bash tests/slurm/cluster.sh up")
    return SlurmCluster()
