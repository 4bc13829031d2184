"""`cancel FOLDER` on the live test cluster (cluster.sh up): a submitted job, and every job of a
submitted build-many folder, cancelled by its folder, with what was cancelled said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_batch_slurm import BatchSite, build_many, ids_of, site, squeue, tsb
from test_submit_watch import Live, cli, live, queued, sacct_state

pytestmark = pytest.mark.slurm
__all__ = ["live", "site"]  # fixtures of the modules above, used here by name


def test_cancel_a_running_job_by_its_folder(live: Live) -> None:
    work = live.root / "to_cancel"
    assert cli("build", str(live.request("to_cancel", "echo started; sleep 300"))).code == 0
    res = cli("submit", str(work), "--json")
    assert res.code == 0, res.stderr
    job = json.loads(res.stdout)["job_id"]
    assert queued(job) in ("PENDING", "RUNNING")
    res = cli("cancel", str(work))
    assert res.code == 0, res.stderr
    assert res.stdout.startswith(f"cancelled job {job} ("), res.stdout
    assert sacct_state(job) == "CANCELLED"
    # a second cancel finds it ended, and says so
    again = cli("cancel", str(work))
    assert again.code == 0, again.stderr
    assert f"already ended: job {job} (CANCELLED" in again.stdout
    # watch then gives the job's verdict: cancelled
    assert cli("watch", str(work), "--poll", "0.2", "-q").code == 12


def test_cancel_a_folder_never_submitted_is_refused(live: Live) -> None:
    assert cli("build", str(live.request("not_submitted", "true"))).code == 0
    res = cli("cancel", str(live.root / "not_submitted"))
    assert res.code == 2
    assert "has not been submitted (no submission.json)" in res.stderr


def test_cancel_a_whole_batch(site: BatchSite) -> None:
    folder, _ = build_many(
        site, "cancelled", "accuracy/test_batch.py::test_sleeps\n" * 3 + "accuracy/test_tiny.py\n"
    )
    res = tsb(site.env, "submit", str(folder), "--max-running", "1")
    assert res.returncode == 0, res.stderr
    ids = ids_of(folder)
    res = tsb(site.env, "cancel", str(folder))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # the three sleepers are cancelled; the quick job may have ended before the cancel (a busy
    # machine leaves time between submit and cancel), and is then named as such
    assert len(lines) == 4, lines
    assert [ln.startswith("cancelled job ") for ln in lines if "test_sleeps" in ln] == [True] * 3
    tiny = [ln for ln in lines if "test_tiny" in ln]
    assert len(tiny) == 1 and tiny[0].startswith(("cancelled job ", "already ended: job ")), lines
    # a cancelled job that ran is COMPLETING while its node cleans up after it (longer on a busy
    # machine): it no longer runs, and nothing is left pending or running
    left = squeue("-j", ",".join(ids), "-o", "%i,%T")
    assert all(state == "COMPLETING" for _, state in left), left
    for job in json.loads((folder / "batch_submission.json").read_text())["jobs"]:
        assert job["job_id"] in res.stdout
    assert Path(folder / "batch_submission.json").is_file()  # the record stays for watch
