"""A rebuilt job folder (its files links into its current set, decision atomic-job-set) runs as a
first build's does: sbatch reads the script through its link, and a remote_slurm job's files are
copied to the cluster as the files they read, not as links."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import make_repo
from tests.slurm.test_submit_watch import POLL, Live, cli, probed_env

if TYPE_CHECKING:
    from conftest import LoopbackSshd, SlurmCluster

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def live(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Live:
    root = tmp_path_factory.mktemp("rebuilt")
    return Live(root, make_repo(root / "repo"), probed_env(root))


def rebuilt(req: Path, work: Path) -> None:
    """Built, then built again with another time limit: the folder now reads its second set."""
    assert cli("build", str(req)).code == 0
    fields = json.loads(req.read_text())
    req.write_text(json.dumps({**fields, "time_limit": "00:04:00"}))
    res = cli("build", str(req))
    assert res.code == 0, res.stderr
    spec = json.loads((work / "job_spec.json").read_text())
    assert os.readlink(spec["script_path"]) == f".tsb-sets/current/{spec['script_name']}"
    assert "#SBATCH --time=00:04:00" in Path(spec["script_path"]).read_text()


def test_a_rebuilt_job_runs(live: Live) -> None:
    req = live.request("again", 'echo "1 passed in 0.01s"')
    rebuilt(req, live.root / "again")
    res = cli("run", str(req), "--force", "--poll", POLL, "--json")
    assert res.code == 0, res.stderr
    assert (res.json["verdict"], res.json["state"]) == ("PASSED", "COMPLETED")


def test_a_rebuilt_remote_job_copies_files_not_links(
    live: Live, sshd_loopback: LoopbackSshd
) -> None:
    env_file = live.root / "slurm_env_remote.json"
    assert cli("probe", "--ssh", sshd_loopback.host, "--output", str(env_file)).code == 0
    remote_work = live.root / "remote_work"
    req = live.remote_request(
        "remote", "echo '2 passed'", env_file, remote_work_dir=str(remote_work)
    )
    rebuilt(req, live.root / "remote")
    res = cli("submit", str(live.root / "remote"), "--json")
    assert res.code == 0, res.stderr
    res = cli("watch", str(live.root / "remote"), "--poll", POLL, "--json")
    assert res.code == 0, res.stderr
    copied = [p for p in remote_work.iterdir() if p.suffix in (".slurm", ".sh")]
    assert copied and not [p for p in copied if p.is_symlink()]
    assert "#SBATCH --time=00:04:00" in (remote_work / "custom_custom.slurm").read_text()
