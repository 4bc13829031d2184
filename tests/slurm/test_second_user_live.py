"""A second Unix and Slurm user (`tsbother`, account tsb2: cluster.sh gives it its association)
against the tool run as root on the live test cluster: its allocation and jobs, named by
records it could write or forge, are never cancelled by root nor have steps sent into them
(decisions persistent-own-allocation and records-acted-on-are-own). Skipped when the account
or its association is missing, or when the tests do not run as root."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_submit_watch import POLL, Live, cli, live, queued

from trtllm_script_builder.process.persistent import STATE_FILE, checkout_mark, state_dir

pytestmark = pytest.mark.slurm
__all__ = ["live"]  # the fixture of test_submit_watch, used here by name

OTHER = "tsbother"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "acting as another user needs root"
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        return f"no Unix user {OTHER}"
    res = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", f"user={OTHER}", "format=account"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if "tsb2" not in res.stdout.split():
        return (
            f"{OTHER} has no Slurm association with account tsb2 (bash tests/slurm/cluster.sh up)"
        )
    return None


def as_other(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", OTHER, "--", *argv],
        capture_output=True, text=True, check=False, cwd="/tmp", timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def others() -> Iterator[list[str]]:
    """Job ids of tsbother's, cancelled (as tsbother) after the test."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    jobs: list[str] = []
    yield jobs
    for job in jobs:
        as_other("scancel", job)


def other_allocation(jobs: list[str], name: str, comment: str) -> str:
    """A held allocation of tsbother's (`salloc --no-shell`) with the job name and comment
    given: anyone may give any comment."""
    res = as_other(
        "salloc", "--no-shell", "--immediate=60", f"--job-name={name}", "--partition=cpu",
        "--account=tsb2", "--nodes=1", "--ntasks-per-node=1", "--time=00:10:00",
        f"--comment={comment}",
    )  # fmt: skip
    m = re.search(r"Granted job allocation (\d+)", res.stdout + res.stderr)
    assert m, res.stdout + res.stderr
    jobs.append(m.group(1))
    return m.group(1)


def steps_of(job: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", job, "-o", "JobID"], capture_output=True, text=True, check=False
    ).stdout
    return [w for w in out.split() if re.fullmatch(rf"{job}\.\d+", w)]


def test_another_users_allocation_with_this_checkouts_mark_is_neither_used_nor_cancelled(
    live: Live, others: list[str]
) -> None:
    """tsbother holds an allocation with the persistent job name and this checkout's mark as
    its comment (the mark is a hash of the checkout's path, which anyone can compute), and
    rewrites the team checkout's state file to name it: root's next persistent jobs run in an
    allocation of root's, the other one keeps running with no step of root's in it, and
    `release` refuses it."""
    theirs = other_allocation(others, "tsb-trtllm.persistent", checkout_mark(live.repo))
    assert queued(theirs) == "RUNNING"
    path = state_dir(live.repo) / STATE_FILE
    mine: list[str] = []
    try:
        assert cli("build", str(live.request("other_alloc_a", "echo a"))).code == 0
        res = cli(
            "run", str(live.root / "other_alloc_a.json"), "--persistent", "--poll", POLL, "--json"
        )
        assert res.code == 0, res.stderr
        mine.append(res.json["job_id"])
        assert mine[0] != theirs and queued(theirs) == "RUNNING"
        # the state file rewritten to name tsbother's allocation (by tsbother, in a checkout
        # whose work_dirs the team may write, or by anyone: the file stays root's)
        state = json.loads(path.read_text())
        path.write_text(json.dumps({**state, "job_id": theirs}))
        assert cli("build", str(live.request("other_alloc_b", "echo b"))).code == 0
        res = cli(
            "run", str(live.root / "other_alloc_b.json"), "--persistent", "--poll", POLL, "--json"
        )
        assert res.code == 0, res.stderr
        mine.append(res.json["job_id"])
        assert mine[1] != theirs
        assert f"leaving allocation {theirs}" in res.stderr
        assert queued(theirs) == "RUNNING" and steps_of(theirs) == []
        path.write_text(json.dumps({**state, "job_id": theirs}))
        res = cli("release", "--repo-root", str(live.repo))
        assert res.code == 2 and f"allocation {theirs}" in res.stderr, res.stderr
        assert queued(theirs) == "RUNNING"
    finally:
        path.unlink(missing_ok=True)
        for job in mine:  # root's own allocations of this test (never tsbother's)
            if job != theirs:
                subprocess.run(["scancel", job], check=False)


def test_a_record_naming_another_users_job_makes_root_cancel_nothing(
    live: Live, others: list[str]
) -> None:
    """A teammate who may write the work_dir replaces submission.json with one of theirs
    naming a real job of theirs: root's `watch --timeout` follows it and cancels nothing,
    `cancel` refuses it (decision records-acted-on-are-own), and their job keeps running."""
    res = as_other(
        "sbatch", "--parsable", "--partition=cpu", "--account=tsb2", "--time=00:05:00",
        "--output=/dev/null", "--wrap=sleep 120",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    theirs = res.stdout.strip().split(";")[0]
    others.append(theirs)
    work = live.root / "shared_record"
    assert cli("build", str(live.request("shared_record", "sleep 60"))).code == 0
    res = cli("submit", str(work), "--json")
    assert res.code == 0, res.stderr
    mine = json.loads(res.stdout)["job_id"]
    try:
        record = work / "submission.json"
        new = work / "record.new"
        new.write_text(json.dumps({**json.loads(record.read_text()), "job_id": theirs}))
        os.chown(new, pwd.getpwnam(OTHER).pw_uid, pwd.getpwnam(OTHER).pw_gid)
        os.replace(new, record)
        res = cli("watch", str(work), "--poll", POLL, "--timeout", "1")
        assert queued(theirs) in ("PENDING", "RUNNING"), res.stderr
        res = cli("cancel", str(work))
        assert res.code == 2 and "not by you" in res.stderr, res.stderr
        assert queued(theirs) in ("PENDING", "RUNNING")
    finally:
        subprocess.run(["scancel", mine], check=False)


def test_links_planted_at_the_next_log_names_in_a_team_work_dir_are_never_followed(
    live: Live, others: list[str]
) -> None:
    """The red-team reproduction: tsbother, in the team's group, plants links at the log names
    of the next job ids (they come in order) in a group-writable work_dir, each naming a file of
    root's. Root's submit is refused, nothing is submitted and the file is untouched (decision
    slurm-logs-folder-is-private). Made `chmod go-w`, the folder is still refused while the
    links made while it was open are in it; without them the job runs and passes."""
    other = pwd.getpwnam(OTHER)
    base = Path(tempfile.mkdtemp(prefix="tsb-team-", dir="/tmp"))
    private = Path(tempfile.mkdtemp(prefix="tsb-victim-", dir="/tmp"))  # root's alone, 0700
    try:
        base.chmod(0o755)  # the team reaches its folders
        victim = private / "victim"
        victim.write_text("root's file\n")
        work = base / "team_logs"
        req = live.request("team_logs", 'echo "1 passed in 0.01s"', work_dir=str(work))
        assert cli("build", str(req)).code == 0
        os.chown(work, 0, other.pw_gid)
        work.chmod(0o2775)  # the team's folder, as umask 002 and a setgid folder make it
        pattern = json.loads((work / "job_spec.json").read_text())["log_file_pattern"]
        res = as_other(
            "sbatch", "--parsable", "--hold", "--partition=cpu", "--account=tsb2",
            "--time=00:01:00", "--output=/dev/null", "--wrap=true",
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        last = res.stdout.strip().split(";")[0]
        others.append(last)
        as_other("scancel", last)
        names = [pattern.replace("%j", str(int(last) + n)) for n in range(1, 41)]
        names += [n.removesuffix(".out") + ".err" for n in names]
        for name in names:
            planted = as_other("ln", "-s", str(victim), str(work / name))
            assert planted.returncode == 0, planted.stderr
        res = cli("submit", str(work), "--json")
        assert res.code == 2, res.stdout + res.stderr
        assert f"{work} can be written by its group: " in res.stderr
        assert f"chmod go-w {work}" in res.stderr
        # and a line for what was planted: closing the folder leaves the links in it
        assert len(res.stderr.splitlines()) == 2
        assert f"{work} holds {len(names)} file(s) or link(s) another user made" in res.stderr
        assert not (work / "submission.json").exists()
        assert victim.read_text() == "root's file\n"

        work.chmod(0o755)
        res = cli("submit", str(work), "--json")
        assert res.code == 2 and f"holds {len(names)} file(s) or link(s)" in res.stderr, res.stderr
        for name in names:
            (work / name).unlink()
        res = cli("submit", str(work), "--json")
        assert res.code == 0, res.stderr
        job = json.loads(res.stdout)["job_id"]
        res = cli("watch", str(work), "--poll", POLL, "--json")
        assert res.code == 0, res.stderr
        assert res.json["verdict"] == "PASSED"
        assert (work / pattern.replace("%j", job)).is_file()
        assert victim.read_text() == "root's file\n"
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
