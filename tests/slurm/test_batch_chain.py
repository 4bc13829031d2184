"""A batch built with `compile` and `sqsh_cache_dir` on the live test cluster (cluster.sh up):
`submit DIR` starts one image import and one compile for all its jobs, then the jobs' array
after them; `watch DIR` follows the chain and the jobs in one loop
(decisions compile-chain and batch-prerequisites).

The jobs are pytest jobs built by the real build-many from a test list, against the tiny
TensorRT-LLM-shaped repo of test_e2e_build (real pytest); the stand-ins of
tests/slurm/standins play enroot, pip and the checkout's scripts/build_wheel.py, each keeping
a record of its calls.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_batch_slurm import BatchSite, build_many, cleanup, ids_of, make_site  # noqa: F401
from test_e2e_build import tsb

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

STANDINS = Path(__file__).resolve().parent / "standins"

TEST_CHAIN = """\
def test_one():
    pass


def test_two():
    pass


def test_three():
    pass
"""

THREE = """\
accuracy/test_chain.py::test_one
accuracy/test_chain.py::test_two
accuracy/test_chain.py::test_three
"""


@dataclass(frozen=True)
class ChainSite(BatchSite):
    wheel_dir: Path
    sqsh_dir: Path
    enroot_record: Path
    build_record: Path

    def builds(self) -> list[dict[str, Any]]:
        return _records(self.build_record)

    def imports(self) -> list[dict[str, Any]]:
        return _records(self.enroot_record)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def site(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> ChainSite:
    root = tmp_path_factory.mktemp("batch_chain")
    wheel_dir, sqsh_dir = root / "wheel", root / "sqsh"
    batch = make_site(
        slurm_cluster,
        root,
        "test_chain.py",
        TEST_CHAIN,
        compile=True,
        cuda_arch="90-real",
        wheel_dir=str(wheel_dir),  # one wheel folder for the batch: one compile
        sqsh_cache_dir=str(sqsh_dir),
    )
    shutil.copy(STANDINS / "build_wheel.py", batch.repo / "scripts" / "build_wheel.py")
    records = root / "records"
    records.mkdir()
    batch.env.update(
        STANDIN_ENROOT_RECORD=str(records / "enroot.jsonl"),
        STANDIN_BUILD_WHEEL_RECORD=str(records / "build_wheel.jsonl"),
        STANDIN_BUILD_WHEEL_STEP="0.05",
    )  # sbatch passes the submitting environment to the jobs
    return ChainSite(
        batch.root,
        batch.repo,
        batch.base,
        batch.env,
        wheel_dir,
        sqsh_dir,
        records / "enroot.jsonl",
        records / "build_wheel.jsonl",
    )


def sacct(*args: str) -> list[list[str]]:
    out = subprocess.run(
        ["sacct", "-n", "-P", *args], capture_output=True, text=True, check=False
    ).stdout
    return [ln.split("|") for ln in out.splitlines() if ln.strip()]


def squeue(ids: list[str], states: bool = False) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%i:%T" if states else "%i"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return out.split()


def still_queued(ids: list[str]) -> list[str]:
    """The jobs squeue still lists, with their states. A job that ended stays listed as
    COMPLETING while Slurm cleans up after it (a second or two): that is not running."""
    deadline = time.monotonic() + 15
    while (left := squeue(ids, states=True)) and time.monotonic() < deadline:
        if all(s.endswith(":COMPLETING") for s in left):
            time.sleep(0.5)
            continue
        break
    return [s for s in left if not s.endswith(":COMPLETING")]


def test_a_batch_of_three_compiles_and_imports_once(
    site: ChainSite,
    cleanup: list[Path],  # noqa: F811
) -> None:
    folder, rows = build_many(site, "compiled", THREE)
    cleanup.append(folder)
    builds, imports = len(site.builds()), len(site.imports())
    res = tsb(site.env, "submit", str(folder), "--json")
    assert res.returncode == 0, res.stderr
    batch = json.loads(res.stdout)
    prereqs = batch["prerequisites"]
    assert [p["kind"] for p in prereqs] == ["import", "compile"]
    (array,) = batch["arrays"]
    assert array["size"] == 3
    assert "submitted import job" in res.stderr and "for 3 job(s)" in res.stderr
    # Slurm holds the array until both prerequisites succeeded
    show = subprocess.run(
        ["scontrol", "show", "job", array["job_id"]], capture_output=True, text=True, check=False
    ).stdout
    assert f"afterok:{prereqs[0]['job_id']}" in show and f"afterok:{prereqs[1]['job_id']}" in show
    started = time.monotonic()
    watch = tsb(site.env, "watch", str(folder), "--poll", "0.3", "--json", "--timeout", "50")
    assert time.monotonic() - started < 55
    assert watch.returncode == 0, watch.stderr
    results = json.loads(watch.stdout.strip().splitlines()[-1])
    assert results["summary"] == {"jobs": 3, "verdicts": {"PASSED": 3}, "exit_status": 0}
    assert [(p["kind"], p["verdict"]) for p in results["prerequisites"]] == [
        ("import", "PASSED"),
        ("compile", "PASSED"),
    ]
    # one compile and one import ran for the three jobs: the stand-ins' records, and Slurm's
    assert len(site.builds()) == builds + 1
    assert len(site.imports()) == imports + 1
    names = [r[0] for r in sacct("-X", "-j", ",".join(ids_of(folder)), "-o", "JobName")]
    assert sum(n.startswith("tsb_compile_") for n in names) == 1  # named after the checkout
    assert sum(n.endswith("_import") for n in names) == 1
    # every job installed the one wheel, after the compile ended
    (wheel,) = site.wheel_dir.glob(f"job-{prereqs[1]['job_id']}/tensorrt_llm-*.whl")
    compile_end = sacct("-X", "-j", prereqs[1]["job_id"], "-o", "End")[0][0]
    for row in rows:
        work = Path(row["work_dir"])
        verdict = json.loads((work / "verdict.json").read_text())
        assert verdict["verdict"] == "PASSED"
        assert [c["kind"] for c in verdict["chain"]] == ["import", "compile"]
        spec = json.loads((work / "job_spec.json").read_text())
        log = (work / spec["log_file_pattern"].replace("%j", verdict["job_id"])).read_text()
        assert f"--force-reinstall {wheel}'" in log and "install -e ." not in log
        start = sacct("-X", "-j", verdict["job_id"], "-o", "Start")[0][0]
        assert start >= compile_end, (start, compile_end)
    # `watch JOBDIR` on one member follows its chain and its task
    one = tsb(site.env, "watch", rows[1]["work_dir"], "--json", "--poll", "0.2")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout.strip().splitlines()[-1])["chain"][1]["verdict"] == "PASSED"


def test_a_failed_compile_fails_every_job_of_the_batch(
    site: ChainSite,
    cleanup: list[Path],  # noqa: F811
) -> None:
    marker = site.repo / "cpp" / "STANDIN_COMPILE_ERROR"
    marker.parent.mkdir(exist_ok=True)
    marker.write_text('identifier "kBlock" is undefined\n')
    builds = len(site.builds())
    try:
        folder, rows = build_many(site, "broken", THREE)
        cleanup.append(folder)
        res = tsb(site.env, "submit", str(folder), "--json")
        assert res.returncode == 0, res.stderr
        watch = tsb(site.env, "watch", str(folder), "--poll", "0.3", "--json", "--timeout", "50")
    finally:
        marker.unlink()
    # every job COMPILE_FAILED (decision batch-exit-status)
    assert watch.returncode == 16, watch.stderr
    results = json.loads(watch.stdout.strip().splitlines()[-1])
    assert results["summary"] == {"jobs": 3, "verdicts": {"COMPILE_FAILED": 3}, "exit_status": 16}
    assert len(site.builds()) == builds + 1  # one compile for the three
    compile_id = results["prerequisites"][1]["job_id"]
    for row in results["jobs"]:
        assert (
            row["reason"] == f"the compile job {compile_id} failed, so the test job never started"
        )
        error = next(e for e in row["evidence"] if "error:" in e)
        assert error.endswith('error: identifier "kBlock" is undefined'), error
    # the summary counts the three test jobs, not the compile job beside them
    assert re.search(r"^batch: 3 job\(s\): 3 COMPILE_FAILED$", watch.stderr, re.M), watch.stderr
    # none of the test jobs ran: no batch step, no log; nothing left in the queue
    ids = ids_of(folder)
    array = json.loads((folder / "batch_submission.json").read_text())["arrays"][0]["job_id"]
    steps = [r[0] for r in sacct("-j", array, "-o", "JobID")]
    assert not [s for s in steps if "." in s], steps
    for row in rows:
        work = Path(row["work_dir"])
        spec = json.loads((work / "job_spec.json").read_text())
        assert not list(work.glob(spec["log_file_pattern"].replace("%j", "*")))
        assert json.loads((work / "verdict.json").read_text())["verdict"] == "COMPILE_FAILED"
    assert still_queued(ids) == []


def test_watch_timeout_cancels_the_compile_with_the_batch(
    site: ChainSite,
    cleanup: list[Path],  # noqa: F811
) -> None:
    folder, _ = build_many(site, "slow_compile", THREE)
    cleanup.append(folder)
    slow = {**site.env, "STANDIN_BUILD_WHEEL_STEP": "5"}  # sbatch passes it to the compile
    res = tsb(slow, "submit", str(folder))
    assert res.returncode == 0, res.stderr
    ids = ids_of(folder)
    watch = tsb(site.env, "watch", str(folder), "--poll", "0.3", "--json", "--timeout", "4")
    assert watch.returncode == 11, watch.stderr  # every job TIMEOUT
    # the compile (and the import, when it has not ended yet) with the three jobs
    assert re.search(r"timeout after 4s: cancelling [45] job\(s\)", watch.stderr), watch.stderr
    results = json.loads(watch.stdout.strip().splitlines()[-1])
    assert results["summary"]["verdicts"] == {"TIMEOUT": 3}
    # the compile, or the import when it had not ended yet, was cancelled: TIMEOUT, and the
    # jobs waiting for it got its verdict
    cut = [p for p in results["prerequisites"] if p["cancelled_by_watch"] == "timeout"]
    assert cut and all(p["verdict"] == "TIMEOUT" for p in cut), results["prerequisites"]
    first = cut[0]
    assert all(
        r["reason"].startswith(f"the {first['kind']} job {first['job_id']}: ")
        for r in results["jobs"]
    )
    assert still_queued(ids) == []


def test_watch_timeout_of_one_job_leaves_the_batchs_compile(
    site: ChainSite,
    cleanup: list[Path],  # noqa: F811
) -> None:
    """`watch JOBDIR --timeout` on one job of a batch cancels that job only: the import and
    compile are the batch's, for its other jobs (only `watch DIR` cancels them)."""
    folder, rows = build_many(site, "one_of_three", THREE)
    cleanup.append(folder)
    slow = {**site.env, "STANDIN_BUILD_WHEEL_STEP": "5"}  # sbatch passes it to the compile
    res = tsb(slow, "submit", str(folder))
    assert res.returncode == 0, res.stderr
    batch = json.loads((folder / "batch_submission.json").read_text())
    imp, comp = (p["job_id"] for p in batch["prerequisites"])
    member = json.loads((folder / rows[0]["work_dir"] / "submission.json").read_text())
    assert member["batch_dir"] == str(folder)
    watch = tsb(site.env, "watch", str(folder / rows[0]["work_dir"]), "--poll", "0.3", "--json", "--timeout", "3")  # fmt: skip
    assert watch.returncode == 11, watch.stderr  # TIMEOUT
    assert "is the batch's, so it keeps running" in watch.stderr, watch.stderr
    v = json.loads(watch.stdout.strip().splitlines()[-1])
    assert v["verdict"] == "TIMEOUT" and v["cancelled_by_watch"] == "timeout", v
    assert f"test job {member['job_id']} cancelled before it started" in v["evidence"]
    left = squeue(ids_of(folder))
    assert comp in left, left  # the compile goes on for the other two
    assert member["job_id"] not in left  # this job's own task is gone
    others = [j["job_id"] for j in batch["jobs"][1:]]
    assert all(j in left for j in others), (others, left)
    assert not sacct("-X", "-j", imp, "-o", "State")[0][0].startswith("CANCELLED")


# ---------------------------------------------------------------- remote, over OpenSSH
# The loopback sshd and user checkout of test_remote_compile_chain (its ssh sessions put the
# stand-ins first on PATH); the jobs are custom jobs built from a YAML list.
from test_remote_compile_chain import Remote, files_of, remote, working_tree  # noqa: E402, F401


def test_remote_batch_syncs_once_compiles_once(remote: Remote) -> None:  # noqa: F811
    wheel_dir = remote.remote_repo.parent / "wheels" / "rbatch"
    base = remote.request("rbatch", wheel_dir=str(wheel_dir), custom_cmd=None)
    listing = remote.root / "rbatch.yaml"
    listing.write_text(
        "- custom_cmd: echo remote one in $(pwd)\n"
        "- custom_cmd: echo remote two at $TSB_SOURCE_COMMIT\n"
        "- custom_cmd: echo remote three\n"
    )
    folder = remote.root / "rbatch"
    res = tsb_cli("build-many", str(listing), "--base", str(base))
    assert res.returncode == 0, res.stderr
    builds = len(_records(remote.wheel_record))
    try:
        sub = tsb_cli("submit", str(folder), "--json")
        assert sub.returncode == 0, sub.stderr
        watch = tsb_cli("watch", str(folder), "--poll", "0.3", "--json", "--timeout", "50")
    finally:
        if (folder / "batch_submission.json").exists():
            subprocess.run(["scancel", *ids_of(folder)], check=False)
    # one sync, before anything was submitted; the clone holds the local working state
    assert sub.stderr.count(f"synced {remote.repo} to {remote.host}:{remote.remote_repo}") == 1
    assert files_of(remote.remote_repo) == working_tree(remote.repo)
    batch = json.loads(sub.stdout)
    assert [p["kind"] for p in batch["prerequisites"]] == ["import", "compile"]
    # every job carries the commit the clone was synced to (decision source-commit-check)
    head = subprocess.run(
        ["git", "-C", str(remote.remote_repo), "rev-parse", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert [j["source_commit"] for j in batch["jobs"]] == [head] * 3
    assert watch.returncode == 0, watch.stderr
    results = json.loads(watch.stdout.strip().splitlines()[-1])
    assert results["summary"] == {"jobs": 3, "verdicts": {"PASSED": 3}, "exit_status": 0}
    calls = _records(remote.wheel_record)[builds:]
    assert [c["cwd"] for c in calls] == [str(remote.remote_repo)]  # one compile, in the clone
    (wheel,) = wheel_dir.glob("job-*/tensorrt_llm-*.whl")  # the one compile's own folder
    for row in results["jobs"]:
        verdict = json.loads((Path(row["work_dir"]) / "verdict.json").read_text())
        log = Path(verdict["log_files"][0]).read_text()
        assert f"--force-reinstall {wheel}'" in log
    assert [row["source_commit"] for row in results["jobs"]] == [head] * 3
    # sbatch --export reached the array's task: the job checked the clone against it, then ran
    two = json.loads((Path(results["jobs"][1]["work_dir"]) / "verdict.json").read_text())
    assert two["source_commit"] == head
    assert f"remote two at {head}" in Path(two["log_files"][0]).read_text()
    assert (
        "remote one in " + str(remote.remote_repo)
        in Path(
            json.loads((Path(results["jobs"][0]["work_dir"]) / "verdict.json").read_text())[
                "log_files"
            ][0]
        ).read_text()
    )
    assert still_queued(ids_of(folder)) == []


def tsb_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The tool in this process's environment (the loopback ssh config it set)."""
    import os
    import sys

    return subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=False,
        timeout=90,
    )
