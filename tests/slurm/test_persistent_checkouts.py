"""Two checkouts of one user in persistent mode on the live test cluster (cluster.sh up): the
second's submit leaves the first's held allocation, and the job running in it, alone
(decision persistent-own-allocation)."""

from __future__ import annotations

import json

import pytest
from test_submit_watch import POLL, Live, cli, live, queued, write_request

from tests.conftest import make_repo
from trtllm_script_builder.process.proc import alive

pytestmark = pytest.mark.slurm
__all__ = ["live"]  # the fixture of test_submit_watch, used here by name


def test_another_checkouts_allocation_and_its_job_are_left_running(live: Live) -> None:
    other = make_repo(live.root / "other_checkout")
    try:
        assert cli("build", str(live.request("held_a", "echo a; sleep 120"))).code == 0
        res = cli("submit", str(live.root / "held_a"), "--persistent", "--json")
        assert res.code == 0, res.stderr
        a = json.loads(res.stdout)
        assert queued(a["alloc_job_id"]) == "RUNNING"
        # the other checkout's first persistent job: a new allocation of its own
        req = write_request(live.root, "held_b", other, live.slurm_env, custom_cmd="echo b")
        assert cli("build", str(req)).code == 0
        res = cli("run", str(req), "--persistent", "--poll", POLL, "--json")
        assert res.code == 0, res.stderr
        assert res.json["job_id"] != a["alloc_job_id"]
        assert f"leaving allocation {a['alloc_job_id']} (RUNNING)" in res.stderr
        assert queued(a["alloc_job_id"]) == "RUNNING"
        assert alive(a["pid"], a["pid_start"])
        # the first checkout's next job does not fit (another account) while its job runs:
        # refused, nothing cancelled
        assert cli("build", str(live.request("held_c", "true", account="tsb2"))).code == 0
        res = cli("submit", str(live.root / "held_c"), "--persistent")
        assert res.code == 2 and "a job runs in it" in res.stderr, res.stderr
        assert queued(a["alloc_job_id"]) == "RUNNING"
    finally:
        cli("cancel", str(live.root / "held_a"))
        cli("release", "--repo-root", str(live.repo))
        cli("release", "--repo-root", str(other))


def test_a_copied_checkouts_state_file_does_not_reach_the_originals_allocation(
    live: Live,
) -> None:
    """`cp -a` of a checkout copies work_dirs/.slurm_alloc.json: the copy's next job that does
    not fit the named allocation cancelled the original's (and the job in it), its `release`
    too."""
    import shutil

    from trtllm_script_builder.process.persistent import STATE_FILE, state_dir

    copy = make_repo(live.root / "copied_checkout")
    try:
        assert cli("build", str(live.request("held_d", "echo d; sleep 120"))).code == 0
        res = cli("submit", str(live.root / "held_d"), "--persistent", "--json")
        assert res.code == 0, res.stderr
        a = json.loads(res.stdout)
        state_dir(copy).mkdir(parents=True, exist_ok=True)
        shutil.copy2(state_dir(live.repo) / STATE_FILE, state_dir(copy) / STATE_FILE)
        res = cli("release", "--repo-root", str(copy))
        assert res.code == 2 and "is not this checkout's" in res.stderr, res.stderr
        assert queued(a["alloc_job_id"]) == "RUNNING"
        req = write_request(live.root, "held_e", copy, live.slurm_env, custom_cmd="echo e")
        assert cli("build", str(req)).code == 0
        res = cli("run", str(req), "--persistent", "--poll", POLL, "--json")
        assert res.code == 0, res.stderr
        assert res.json["job_id"] != a["alloc_job_id"]
        assert f"leaving allocation {a['alloc_job_id']}: the state file names" in res.stderr
        assert queued(a["alloc_job_id"]) == "RUNNING"
        assert alive(a["pid"], a["pid_start"])
    finally:
        cli("cancel", str(live.root / "held_d"))
        cli("release", "--repo-root", str(live.repo))
        cli("release", "--repo-root", str(copy))
