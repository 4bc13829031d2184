"""A batch bigger than the test cluster's MaxArraySize (5, cluster.sh) goes in as arrays Slurm
takes, and every job of it runs (decision max-array-size)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_batch_slurm import build_many, make_site, watch
from test_e2e_build import tsb

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

SEVEN = "".join(f"def test_{n}():\n    pass\n\n\n" for n in "abcdefg")


def test_a_batch_over_max_array_size_runs_every_job(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True
    ).stdout
    assert any(ln.split() == ["MaxArraySize", "=", "5"] for ln in config.splitlines())
    site = make_site(slurm_cluster, tmp_path, "test_seven.py", SEVEN)
    probed = tmp_path / "slurm_env.json"
    env = json.loads(probed.read_text())
    assert env["max_array_size"] == 5
    # not probed: submit asks the cluster itself
    del env["max_array_size"]
    probed.write_text(json.dumps(env))
    folder, rows = build_many(
        site, "seven", "".join(f"accuracy/test_seven.py::test_{n}\n" for n in "abcdefg")
    )
    assert len(rows) == 7
    res = tsb(site.env, "submit", str(folder), "--json")
    if res.returncode != 0:
        pytest.fail(res.stderr)
    batch = json.loads(res.stdout)
    try:
        assert [a["size"] for a in batch["arrays"]] == [5, 2], res.stderr
        drivers = [Path(a["driver"]).read_text() for a in batch["arrays"]]
        assert ["#SBATCH --array=0-4\n" in drivers[0], "#SBATCH --array=0-1\n" in drivers[1]] == [
            True,
            True,
        ]
        assert "(MaxArraySize is 5)" in res.stderr
        watcher = watch(site, folder, "--json", "--timeout", "240")
        out, err = watcher.communicate(timeout=300)
    finally:
        subprocess.run(["scancel", *(a["job_id"] for a in batch["arrays"])], check=False)
    assert watcher.returncode == 0, err
    results = json.loads(out.strip().splitlines()[-1])
    assert results["summary"]["verdicts"] == {"PASSED": 7}, results


def test_a_limit_probed_before_the_cluster_lowered_it_is_named_with_the_fix(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The jobs' slurm_env says MaxArraySize 1001 (probed before the cluster's became 5):
    Slurm refuses the array of 7; the refusal names the limit, where it came from, the
    cluster's limit now and what to do."""
    site = make_site(slurm_cluster, tmp_path, "test_seven.py", SEVEN)
    probed = tmp_path / "slurm_env.json"
    env = json.loads(probed.read_text())
    env["max_array_size"] = 1001
    probed.write_text(json.dumps(env))
    folder, rows = build_many(
        site, "seven", "".join(f"accuracy/test_seven.py::test_{n}\n" for n in "abcdefg")
    )
    assert len(rows) == 7
    res = tsb(site.env, "submit", str(folder))
    assert res.returncode == 3, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "error: sbatch: sbatch: error: Batch job submission failed: Invalid job array specification"
    )
    assert line.endswith(
        "(an array of 7 jobs, indexes 0-6, cut by MaxArraySize 1001 from the jobs' slurm_env "
        "(probe); the cluster's MaxArraySize is 5 now); probe the cluster again "
        "(trtllm-script-builder probe -o SLURM_ENV_FILE), build the batch again and submit it: "
        "it goes in as arrays of at most 5 jobs"
    ), line
    assert str(folder) not in line
