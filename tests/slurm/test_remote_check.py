"""`check` of a remote_slurm job: on its own cluster, over a real OpenSSH server on loopback.

The job is built here for the cluster behind ssh (probed with `probe --ssh`), and `check` asks
that cluster: `sbatch --test-only` there (the script on standard input, nothing copied), and
its partitions, GRES, accounts and MPI plugins. It says which cluster and host it checked.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from test_submit_watch import write_request

from tests.conftest import make_repo
from trtllm_script_builder.cli import main

if TYPE_CHECKING:  # the fixtures' types; conftest is not imported at run time
    from conftest import LoopbackSshd, SlurmCluster

pytestmark = pytest.mark.slurm


@dataclass
class Remote:
    root: Path
    repo: Path
    env_file: Path
    host: str

    def build(self, name: str, **fields: Any) -> Path:
        remote = {
            "custom_cmd": "nvidia-smi -L",
            "execution_scenario": "remote_slurm",
            "required_devices": 2,
            "gpus_per_node": None,
            "partition": "gpu",
            "models_path": None,
            "checkpoint_path": str(self.repo / "models"),
            "remote_repo_path": str(self.repo),
            "remote_work_dir": str(self.root / f"{name}_remote"),
        }
        path = write_request(self.root, name, self.repo, self.env_file, **{**remote, **fields})
        res = CliRunner().invoke(main, ["build", str(path)])
        assert res.exit_code == 0, res.output
        return self.root / name


@pytest.fixture(scope="module")
def remote(
    slurm_cluster: SlurmCluster,
    sshd_loopback: LoopbackSshd,
    tmp_path_factory: pytest.TempPathFactory,
) -> Remote:
    root = tmp_path_factory.mktemp("remote_check")
    repo = make_repo(root / "repo")
    env_file = root / "slurm_env_remote.json"
    res = CliRunner().invoke(
        main, ["probe", "--ssh", sshd_loopback.host, "--output", str(env_file)]
    )
    assert res.exit_code == 0, res.output
    return Remote(root, repo, env_file, sshd_loopback.host)


def cluster_name() -> str:
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"^ClusterName\s*=\s*(\S+)", config, re.M)
    assert match
    return match.group(1)


def test_a_fitting_remote_job_is_checked_on_its_cluster(remote: Remote) -> None:
    work = remote.build("fits")
    res = CliRunner().invoke(main, ["check", str(work)])
    assert res.exit_code == 0, res.output
    assert res.stdout == f"ok: {work} fits cluster {cluster_name()} on {remote.host}\n"
    assert not (remote.root / "fits_remote").exists()  # check copies nothing there
    res = CliRunner().invoke(main, ["check", str(work), "--json"])
    data = json.loads(res.stdout)
    assert data == {"ok": True, "problems": [], "cluster": cluster_name(), "host": remote.host}


def test_more_gpus_than_the_partition_has_is_refused_with_slurms_reason(remote: Remote) -> None:
    """The builder never writes more than 8 GPUs for one node, so the job is the fitting one
    as a stale cluster file would have it built: 9 GPUs on the 8-GPU partition."""
    work = remote.build("too_many")
    spec_file = work / "job_spec.json"
    spec = json.loads(spec_file.read_text())
    script = Path(spec["script_path"])
    text = script.read_text()
    assert "#SBATCH --gres=gpu:2\n" in text
    script.write_text(text.replace("#SBATCH --gres=gpu:2\n", "#SBATCH --gres=gpu:9\n"))
    spec["slurm_params"]["gres"] = "gpu:9"
    spec_file.write_text(json.dumps(spec))

    res = CliRunner().invoke(main, ["check", str(work)])
    assert res.exit_code == 1, res.output
    problems = res.stdout.splitlines()
    assert (
        "problem: sbatch --test-only: allocation failure: Requested node configuration is not "
        "available"
    ) in problems
    assert any("asks for 9 gpu per node on 1 node(s); nodes of partition gpu have 8" in p
               for p in problems)  # fmt: skip
    assert res.stderr == (
        f"{len(problems)} problem(s) in {work} on cluster {cluster_name()} on {remote.host}\n"
    )


def test_an_unreachable_host_exits_3(remote: Remote) -> None:
    work = remote.build("unreachable")
    res = CliRunner().invoke(main, ["check", str(work), "--ssh-host", "nohost.invalid"])
    assert res.exit_code == 3, res.output
    assert res.stdout.startswith("problem: ssh_host: ssh nohost.invalid: ")


def test_a_remote_log_folder_others_may_write_is_refused_on_the_cluster(remote: Remote) -> None:
    """The folder the job's Slurm logs go to on the cluster is open to its group: submit
    checks it there, over ssh, and refuses before copying or submitting anything; closed, the
    job goes in (decision slurm-logs-folder-is-private)."""
    there = remote.root / "team_remote"
    there.mkdir()
    there.chmod(0o2775)  # a team's folder on the cluster
    work = remote.build("team", remote_work_dir=str(there))
    res = CliRunner().invoke(main, ["submit", str(work), "--json"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(
        f"error: remote_work_dir: {there} on {remote.host} can be written by its group: "
    )
    assert f"chmod go-w {there}" in res.stderr
    assert list(there.iterdir()) == [] and not (work / "submission.json").exists()
    there.chmod(0o755)
    res = CliRunner().invoke(main, ["submit", str(work), "--json"])
    assert res.exit_code == 0, res.output
    subprocess.run(["scancel", json.loads(res.stdout)["job_id"]], check=False)
