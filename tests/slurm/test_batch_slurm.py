"""submit / watch of a whole build-many folder on the live test cluster (cluster.sh up).

The jobs are pytest jobs built by the real build-many from a test list, against the tiny
TensorRT-LLM-shaped repo of test_e2e_build (real pytest; its conftest skips a test when Slurm
gave fewer GPUs than its skip_less_device asks, as TensorRT-LLM's does; pip and nvidia-smi are
the stand-ins of tests/slurm/standins). Jobs of one GPU count share a shape, so they go in as
one Slurm job array; a job of another count goes in alone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_e2e_build import make_repo, tsb, user_env

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import LoopbackSshd, SlurmCluster

pytestmark = pytest.mark.slurm

TEST_BATCH = """\
import time

import pytest


def test_passes():
    pass


def test_fails():
    assert False, "this test fails on purpose"


@pytest.mark.skip(reason="skipped on purpose")
def test_skipped():
    pass


def test_sleeps():
    time.sleep(120)


@pytest.mark.skip_less_device(8)
def test_sleeps_on_eight():
    time.sleep(120)
"""

MIXED = """\
accuracy/test_batch.py::test_passes
accuracy/test_batch.py::test_fails
accuracy/test_batch.py::test_skipped
accuracy/test_tiny.py::TestTiny::test_two_gpus
"""


@dataclass(frozen=True)
class BatchSite:
    root: Path
    repo: Path
    base: Path
    env: dict[str, str]


def make_site(
    slurm_cluster: SlurmCluster, root: Path, test_file: str, text: str, **base: Any
) -> BatchSite:
    """A user's home, the tiny checkout with accuracy/<test_file> holding `text`, its probed
    slurm_env and the base request of the batches (`base` over the local_slurm defaults)."""
    home = root / "home"
    home.mkdir()
    repo = make_repo(root / "TensorRT-LLM")
    (repo / "tests" / "integration" / "defs" / "accuracy" / test_file).write_text(text)
    env = user_env(home)
    slurm_env = root / "slurm_env.json"
    res = tsb(env, "probe", "--output", str(slurm_env))
    assert res.returncode == 0, res.stderr
    request = {
        "execution_scenario": "local_slurm",
        "repo_root": str(repo),
        "partition": slurm_cluster.gpu_partition,
        "account": slurm_cluster.account,
        "slurm_env_file": str(slurm_env),
        "llm_models_root": "/models",
        "models_path": str(repo / "models"),
        "time_limit": "00:03:00",
        **base,
    }
    (root / "base.json").write_text(json.dumps(request))
    return BatchSite(root, repo, root / "base.json", env)


@pytest.fixture(scope="module")
def site(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> BatchSite:
    return make_site(slurm_cluster, tmp_path_factory.mktemp("batch"), "test_batch.py", TEST_BATCH)


def build_many(site: BatchSite, name: str, tests: str) -> tuple[Path, list[dict[str, Any]]]:
    listing = site.root / f"{name}.txt"
    listing.write_text(tests)
    folder = site.root / name
    res = tsb(
        site.env, "build-many", str(listing), "--base", str(site.base), "--work-dir", str(folder)
    )
    assert res.returncode == 0, res.stderr
    return folder, json.loads((folder / "jobs.json").read_text())


def squeue(*args: str) -> list[list[str]]:
    out = subprocess.run(
        ["squeue", "-h", "-r", *args], capture_output=True, text=True, check=False
    ).stdout
    return [ln.split(",") for ln in out.splitlines() if ln.strip()]


def watch(site: BatchSite, folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trtllm_script_builder", "watch", str(folder), "--poll", "0.3"]
        + list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=site.env,
    )


def ids_of(folder: Path) -> list[str]:
    """Every Slurm job `submit DIR` started: prerequisites, arrays and plain jobs."""
    batch = json.loads((folder / "batch_submission.json").read_text())
    return (
        [p["job_id"] for p in batch.get("prerequisites") or []]
        + [a["job_id"] for a in batch["arrays"]]
        + [j["job_id"] for j in batch["jobs"] if "array_job_id" not in j]
    )


@pytest.fixture
def cleanup() -> Any:
    folders: list[Path] = []
    yield folders
    for folder in folders:
        if (folder / "batch_submission.json").exists():
            subprocess.run(["scancel", *ids_of(folder)], check=False)


def test_mixed_batch_throttled_to_one_gives_one_verdict_per_job(
    site: BatchSite, cleanup: list[Path]
) -> None:
    folder, rows = build_many(site, "mixed", MIXED)
    cleanup.append(folder)
    assert [r["required_devices"] for r in rows] == [1, 1, 1, 2]
    res = tsb(site.env, "submit", str(folder), "--max-running", "1", "--json")
    assert res.returncode == 0, res.stderr
    batch = json.loads(res.stdout)
    (array,) = batch["arrays"]
    assert (array["size"], array["max_running"]) == (3, 1)
    driver = Path(array["driver"])
    assert "#SBATCH --array=0-2%1\n" in driver.read_text()
    for cmd in (["bash", "-n", str(driver)], ["shellcheck", str(driver)]):
        check = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
    show = subprocess.run(
        ["scontrol", "show", "job", array["job_id"]], capture_output=True, text=True, check=False
    ).stdout
    assert "ArrayTaskThrottle=1" in show
    watcher = watch(site, folder, "--json")
    # While the batch runs: never more than one task of the array running, the others
    # held back by the throttle.
    seen_limit = False
    most_running = 0
    while watcher.poll() is None:
        tasks = [t for t in squeue("-j", array["job_id"], "-o", "%i,%T,%r")]
        running = [t for t in tasks if t[1] in ("RUNNING", "COMPLETING")]
        most_running = max(most_running, len([t for t in running if t[1] == "RUNNING"]))
        seen_limit |= any(t[1] == "PENDING" and t[2] == "JobArrayTaskLimit" for t in tasks)
        time.sleep(0.2)
    out, err = watcher.communicate()
    assert most_running <= 1
    assert seen_limit
    assert watcher.returncode == 1, err  # verdicts differ: 1 (decision batch-exit-status)
    # off a terminal: plain progress lines, and one line per job as it ends
    assert "[watch] FAILED: accuracy/test_batch.py::test_fails (job " in err
    assert " pending, " in err and "\r" not in err
    # the driver's own logs, one per task (empty: each task writes its job's logs)
    logs = sorted(p.name for p in folder.glob("batch_array0_*.out"))
    assert logs == [f"batch_array0_{array['job_id']}_{t}.out" for t in range(3)]
    results = json.loads(out.strip().splitlines()[-1])
    assert results == json.loads((folder / "results.json").read_text())
    assert results["summary"] == {
        "jobs": 4,
        "verdicts": {"PASSED": 2, "FAILED": 1, "NOT_RUN": 1},
        "exit_status": 1,
    }
    by_entry = {r["entry"]: r for r in results["jobs"]}
    failed = by_entry["accuracy/test_batch.py::test_fails"]
    assert failed["verdict"] == "FAILED" and failed["exit_code"] == 1
    assert failed["tests"]["failing"] == ["accuracy/test_batch.py::test_fails"]
    assert failed["array_task"] == f"{array['job_id']}_1"
    skipped = by_entry["accuracy/test_batch.py::test_skipped"]
    assert skipped["verdict"] == "NOT_RUN" and skipped["tests"]["skipped"] == 1
    assert by_entry["accuracy/test_tiny.py::TestTiny::test_two_gpus"]["array_task"] is None
    # every job's verdict.json, as single-job watch writes it, and its log under its own id
    for row in rows:
        work = Path(row["work_dir"])
        verdict = json.loads((work / "verdict.json").read_text())
        result = next(r for r in results["jobs"] if r["work_dir"] == row["work_dir"])
        assert verdict["verdict"] == result["verdict"]
        assert verdict["job_id"] == result["job_id"] and verdict["job_id"].isdigit()
        spec = json.loads((work / "job_spec.json").read_text())
        log = work / spec["log_file_pattern"].replace("%j", verdict["job_id"])
        assert f"Job {verdict['job_id']} finished with exit code" in log.read_text()
    # the merged JUnit report names the failing test once, in its job's suite
    junit = ET.parse(folder / "junit.xml").getroot()
    assert junit.tag == "testsuites"
    assert (junit.get("tests"), junit.get("failures"), junit.get("skipped")) == ("4", "1", "1")
    failures = [c for c in junit.iter("testcase") if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failures] == [
        ("accuracy.test_batch", "test_fails")
    ]
    # `watch JOBDIR` follows one task of the array on its own
    one = tsb(site.env, "watch", failed["work_dir"], "--json", "--poll", "0.2")
    assert one.returncode == 1, one.stderr
    assert json.loads(one.stdout.strip().splitlines()[-1])["job_id"] == failed["job_id"]


def test_watch_timeout_cancels_the_whole_batch(site: BatchSite, cleanup: list[Path]) -> None:
    folder, _ = build_many(
        site,
        "sleepers",
        "accuracy/test_batch.py::test_sleeps\n" * 3
        + "accuracy/test_batch.py::test_sleeps_on_eight\n",
    )
    cleanup.append(folder)
    res = tsb(site.env, "submit", str(folder), "--max-running", "1")
    assert res.returncode == 0, res.stderr
    ids = ids_of(folder)
    assert len(ids) == 2  # the array of three, and the 8-GPU job
    started = time.monotonic()
    watcher = watch(site, folder, "--timeout", "4", "--json")
    out, err = watcher.communicate(timeout=120)
    # the tasks cancelled while they waited have no sacct row of their own: their array's
    # record answers for them at once (no wait for Slurm to "know" them)
    assert time.monotonic() - started < 25, err
    assert watcher.returncode == 11, err  # every job TIMEOUT
    results = json.loads(out.strip().splitlines()[-1])
    assert results["summary"]["verdicts"] == {"TIMEOUT": 4}
    assert results["cancelled_by_watch"] == "timeout"
    # Throttled to one: one task runs, two wait. The cancel may let the scheduler start a waiting
    # one before its own kill arrives (decision array-task-removed), so at least one never started.
    never = [r for r in results["jobs"] if r["array_task"] and r["job_id"] == r["array_task"]]
    assert len(never) >= 1
    assert squeue("-j", ",".join(ids), "-o", "%i,%T") == []
    assert squeue("-j", ",".join(ids), "-t", "all", "-o", "%i,%T") == [] or all(
        t[1] in ("CANCELLED", "COMPLETED", "FAILED")
        for t in squeue("-j", ",".join(ids), "-t", "all", "-o", "%i,%T")
    )


def test_interrupt_off_a_terminal_cancels_the_batch(site: BatchSite, cleanup: list[Path]) -> None:
    folder, _ = build_many(site, "interrupted", "accuracy/test_batch.py::test_sleeps\n" * 2)
    cleanup.append(folder)
    res = tsb(site.env, "submit", str(folder))
    assert res.returncode == 0, res.stderr
    ids = ids_of(folder)
    watcher = watch(site, folder)
    deadline = time.monotonic() + 30
    while not squeue("-j", ",".join(ids), "-t", "RUNNING", "-o", "%i,%T"):
        assert time.monotonic() < deadline, "the jobs did not start"
        time.sleep(0.2)
    assert watcher.stderr is not None
    first = watcher.stderr.readline()  # the loop runs: its first progress line
    assert first.startswith("[watch] 0/2 done"), first
    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=90)
    assert "cancelling 2 job(s)" in err
    assert watcher.returncode == 12, err  # every job CANCELLED
    # accounting has their end; a node may still be cleaning up after one (COMPLETING): nothing
    # is left pending or running
    left = squeue("-j", ",".join(ids), "-o", "%i,%T")
    assert all(state == "COMPLETING" for _, state in left), left
    results = json.loads((folder / "results.json").read_text())
    assert results["summary"]["verdicts"] == {"CANCELLED": 2}


# ---------------------------------------------------------------- remote, over OpenSSH
# The loopback sshd (conftest's sshd_loopback), in front of the same cluster; the jobs are custom
# jobs (no install step), copied to their remote_work_dir before sbatch runs there.
from test_submit_watch import Live, cli, live  # noqa: E402, F401


def test_remote_batch_over_ssh(live: Live, sshd_loopback: LoopbackSshd) -> None:  # noqa: F811
    env_file = live.root / "slurm_env_batch_remote.json"
    res = cli("probe", "--ssh", sshd_loopback.host, "--output", str(env_file))
    assert res.code == 0, res.stderr
    base = live.remote_request("remote_batch", "true", env_file, time_limit="00:02:00")
    listing = live.root / "remote_list.yaml"
    listing.write_text(
        "- custom_cmd: echo remote one from $(pwd)\n"
        "- custom_cmd: echo remote two; exit 3\n"
        "- custom_cmd: echo remote three\n"
    )
    folder = live.root / "remote_batch"
    res = cli("build-many", str(listing), "--base", str(base))
    assert res.code == 0, res.stderr
    rows = json.loads((folder / "jobs.json").read_text())
    res = cli("submit", str(folder), "--max-running", "2", "--json")
    assert res.code == 0, res.stderr
    batch = json.loads(res.stdout)
    (array,) = batch["arrays"]
    assert (batch["scenario"], batch["ssh_host"], array["size"]) == (
        "remote_slurm",
        sshd_loopback.host,
        3,
    )
    remote_dir = Path(batch["remote_batch_dir"])
    assert array["driver"] == str(remote_dir / "batch_array0.slurm")
    assert (remote_dir / "batch_array0.slurm").is_file()  # copied there (same machine)
    try:
        res = cli("watch", str(folder), "--poll", "0.3", "--json", "--timeout", "60")
    finally:
        subprocess.run(["scancel", array["job_id"]], check=False)
    assert res.code == 1, res.stderr  # PASSED and FAILED: 1
    results = json.loads(res.stdout.strip().splitlines()[-1])
    assert results["summary"]["verdicts"] == {"PASSED": 2, "FAILED": 1}
    failed = next(r for r in results["jobs"] if r["verdict"] == "FAILED")
    assert failed["exit_code"] == 3 and failed["array_task"] == f"{array['job_id']}_1"
    for row in rows:
        spec = json.loads((Path(row["work_dir"]) / "job_spec.json").read_text())
        verdict = json.loads((Path(row["work_dir"]) / "verdict.json").read_text())
        remote_log = Path(spec["remote_work_dir"]) / spec["log_file_pattern"].replace(
            "%j", verdict["job_id"]
        )
        assert remote_log.is_file() and verdict["log_files"][0] == str(remote_log)
        assert not list(Path(row["work_dir"]).glob("*.out"))  # the logs stayed remote
    one = Path(rows[0]["work_dir"])
    assert f"remote one from {json.loads((one / 'job_spec.json').read_text())['repo_root']}" in (
        Path(json.loads((one / "verdict.json").read_text())["log_files"][0]).read_text()
    )
