"""submit / watch / run / release against the live test cluster (cluster.sh up), locally,
in a held allocation, and over a real OpenSSH server on loopback in front of the same cluster.

Jobs are custom jobs built by the real builder for the cpu partition (no install step: the
fake pyxis runs every task on the host). One job with a 1-minute time limit is submitted when
the module starts and watched by the last test, so Slurm's own TIMEOUT (about 80 s here)
overlaps the other tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from tests.conftest import make_repo
from trtllm_script_builder.cli import main
from trtllm_script_builder.process.persistent import STATE_FILE
from trtllm_script_builder.process.probe import probe

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import LoopbackSshd, SlurmCluster

pytestmark = pytest.mark.slurm

POLL = "0.2"
# the persistent allocation's state file keys (decision persistent-allocation)
ALLOC_KEYS = {
    "job_id", "container_name", "nodelist", "partition", "account", "nodes", "gpus_per_node",
    "docker_image", "container_mounts", "allocated_at", "time_limit", "installed",
}  # fmt: skip


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout.strip().splitlines()[-1])
        return data


def cli(*args: str) -> Result:
    res = CliRunner().invoke(main, list(args))
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Result(res.exit_code, res.stdout, res.stderr)


def sacct(job: str, fields: str = "State,Start", timeout: float = 10) -> list[str]:
    """The job's final accounting row (slurmdbd may lag a moment)."""
    deadline = time.monotonic() + timeout
    row: list[str] = []
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", job, "-o", fields],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        row = out.splitlines()[0].split("|") if out else []
        if row and row[0] not in ("PENDING", "RUNNING", "COMPLETING"):
            return row
        time.sleep(0.3)
    return row


def sacct_state(job: str, timeout: float = 10) -> str:
    """The job's final state in accounting, without the `by UID` of a cancel."""
    row = sacct(job, "State", timeout)
    return row[0].split(" ")[0] if row else ""


def queued(job: str) -> str:
    return subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, check=False
    ).stdout.strip()


def write_request(root: Path, name: str, repo: Path, slurm_env: Path, **fields: Any) -> Path:
    """<root>/<name>.json: a one-GPU custom job (`fields` name its custom_cmd) of the checkout
    `repo` on the cpu partition, work_dir <root>/<name>, with `fields` over these values (a
    field given as None is left out)."""
    req: dict[str, Any] = {
        "execution_scenario": "local_slurm",
        "work_dir": str(root / name),
        "repo_root": str(repo),
        "required_devices": 1,
        "gpus_per_node": 1,
        "partition": "cpu",
        "account": "tsb",
        "slurm_env_file": str(slurm_env),
        "llm_models_root": "/models",
        "models_path": str(repo / "models"),
        "container_image": "nvcr.io/test/trtllm:x86_64-1",
        "skip_install": True,
        "time_limit": "00:05:00",
        **fields,
    }
    path = root / f"{name}.json"
    path.write_text(json.dumps({k: v for k, v in req.items() if v is not None}))
    return path


def probed_env(root: Path) -> Path:
    """<root>/slurm_env.json: what `probe` finds on the test cluster."""
    env, rc = probe()
    assert rc == 0, env["errors"]
    slurm_env = root / "slurm_env.json"
    slurm_env.write_text(json.dumps(env))
    return slurm_env


@dataclass
class Live:
    root: Path
    repo: Path
    slurm_env: Path

    def request(self, name: str, custom_cmd: str, **fields: Any) -> Path:
        fields = {"custom_cmd": custom_cmd, **fields}
        return write_request(self.root, name, self.repo, self.slurm_env, **fields)

    def remote_request(self, name: str, custom_cmd: str, env_file: Path, **fields: Any) -> Path:
        """`request` for remote_slurm over the loopback sshd (`env_file`: probe --ssh's)."""
        remote = {
            "execution_scenario": "remote_slurm",
            "slurm_env_file": str(env_file),
            "remote_repo_path": str(self.repo),
            "models_path": None,
            "checkpoint_path": str(self.repo / "models"),
        }
        return self.request(name, custom_cmd, **{**remote, **fields})


@pytest.fixture(scope="module")
def live(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Live:
    root = tmp_path_factory.mktemp("submit_watch")
    repo = make_repo(root / "repo")
    slurm_env = probed_env(root)
    return Live(root, repo, slurm_env)


@pytest.fixture(scope="module", autouse=True)
def overtime(live: Live) -> Iterator[str]:
    """A job over its 1-minute time limit, submitted first; the last test watches it."""
    work = live.root / "overtime"
    res = cli("build", str(live.request("overtime", "echo started; sleep 300", time_limit="1")))
    assert res.code == 0, res.stderr
    res = cli("submit", str(work), "--json")
    assert res.code == 0, res.stderr
    job = json.loads(res.stdout)["job_id"]
    yield job
    subprocess.run(["scancel", job], check=False)


# ---------------------------------------------------------------- one-shot sbatch


def test_passing_job(live: Live) -> None:
    # It runs a few seconds, so watch sees it running (the progress line) on a busy machine too.
    cmd = 'sleep 3; echo "3 passed in 0.01s"'
    res = cli("run", str(live.request("pass", cmd)), "--poll", POLL, "--json")
    assert res.code == 0, res.stderr
    v = res.json
    assert (v["verdict"], v["state"], v["exit_code"]) == ("PASSED", "COMPLETED", 0)
    assert "3 passed in 0.01s" in res.stdout  # streamed
    assert "Job " in res.stdout and "[watch] job" in res.stderr
    job = v["job_id"]
    assert sacct_state(job) == "COMPLETED"
    sub = json.loads((live.root / "pass" / "submission.json").read_text())
    assert (sub["job_id"], sub["scenario"]) == (job, "local_slurm")
    assert sub["log_file"] == str(live.root / "pass" / f"custom_custom_{job}.out")
    assert Path(sub["log_file"]).is_file()
    # refused a second time, allowed with --force
    again = cli("submit", str(live.root / "pass"))
    assert again.code == 2 and "already submitted" in again.stderr
    again = cli("submit", str(live.root / "pass"), "--force")
    assert again.code == 0 and not re.search(rf"submitted job {job}\b", again.stdout)
    assert cli("watch", str(live.root / "pass"), "--poll", POLL, "-q").code == 0


def test_a_work_dir_with_percent_signs_is_watched_at_its_real_log(live: Live) -> None:
    """Slurm expands `%` in --output (`%j` the job id, `%x` the job name); the #SBATCH line
    escapes the folder's, so the log is in the folder as named, which is the path submit
    records and watch reads."""
    res = cli(
        "run",
        str(live.request("pct%x%j%%dir", 'echo "1 passed in 0.01s"')),
        "--poll",
        POLL,
        "--json",
    )
    assert res.code == 0, res.stderr
    v = res.json
    assert v["verdict"] == "PASSED" and "1 passed in 0.01s" in res.stdout
    folder = live.root / "pct%x%j%%dir"
    sub = json.loads((folder / "submission.json").read_text())
    assert sub["log_file"] == str(folder / f"custom_custom_{v['job_id']}.out")
    assert "1 passed" in Path(sub["log_file"]).read_text()
    assert v["log_files"][0] == sub["log_file"]  # what watch read, not scontrol's StdOut
    assert not list(live.root.glob("pct*")) or {p.name for p in live.root.glob("pct*")} == {
        "pct%x%j%%dir",
        "pct%x%j%%dir.json",
    }


def test_failing_job_quotes_its_stderr(live: Live) -> None:
    cmd = "echo step 1; python3 -c 'raise SystemExit(\"Error: boom\")'"
    res = cli("run", str(live.request("fail", cmd)), "--poll", POLL, "--json")
    v = res.json
    assert (res.code, v["verdict"], v["state"], v["exit_code"]) == (1, "FAILED", "FAILED", 1), v
    assert any(e.endswith("Error: boom") and ".err:" in e for e in v["evidence"]), v
    assert not any("finished with exit code" in e for e in v["evidence"])


def test_hang_detected_cancels_the_job(live: Live) -> None:
    t0 = time.monotonic()
    cmd = "echo start; echo 'HANG DETECTED in rank 0'; sleep 120"
    res = cli("run", str(live.request("hang", cmd)), "--poll", POLL, "--json")
    v = res.json
    assert (res.code, v["verdict"], v["cancelled_by_watch"]) == (14, "HANG_DETECTED", "hang")
    assert any("HANG DETECTED in rank 0" in e for e in v["evidence"])
    assert time.monotonic() - t0 < 30
    assert sacct_state(v["job_id"]) == "CANCELLED"


def test_watch_timeout_cancels_the_job(live: Live) -> None:
    res = cli(
        "run", str(live.request("wt", "sleep 120")), "--poll", POLL, "--timeout", "2", "--json"
    )
    v = res.json
    assert (res.code, v["verdict"], v["timed_out"], v["cancelled_by_watch"]) == (
        11,
        "TIMEOUT",
        True,
        "timeout",
    )
    assert sacct_state(v["job_id"]) == "CANCELLED"


def test_keep_running_then_cancelled_from_outside(live: Live) -> None:
    req = live.request("keep", "echo waiting; sleep 120")
    res = cli("run", str(req), "--poll", POLL, "--timeout", "1.5", "--keep-running", "--json")
    v = res.json
    assert (res.code, v["verdict"], v["state"], v["cancelled_by_watch"]) == (
        11,
        "TIMEOUT",
        "RUNNING",
        None,
    )
    job = v["job_id"]
    assert queued(job) == "RUNNING"
    subprocess.run(["scancel", job], check=True)
    res = cli("watch", str(live.root / "keep"), "--poll", POLL, "--json")
    v = res.json
    assert (res.code, v["verdict"], v["state"]) == (12, "CANCELLED", "CANCELLED")
    assert any("CANCELLED AT" in e for e in v["evidence"]), v


def test_container_start_failure_is_infra(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    # A mount source pyxis cannot find: the home folder (the build checks the models path).
    monkeypatch.setenv("HOME", str(live.root / "no-such-home"))
    res = cli("run", str(live.request("infra", "echo never")), "--poll", POLL, "--json")
    v = res.json
    assert (res.code, v["verdict"], v["state"]) == (10, "INFRA_FAILURE", "FAILED")
    assert any("pyxis: --container-mounts: mount source" in e for e in v["evidence"]), v


# ---------------------------------------------------------------- persistent allocation


def test_persistent_allocation_reuse_and_release(live: Live) -> None:
    state_file = live.repo / "work_dirs" / STATE_FILE
    try:
        res = cli("run", str(live.request("p1", "echo in the allocation")), "--persistent", "--poll", POLL, "--json")  # fmt: skip
        assert res.code == 0, res.stderr
        first = res.json
        alloc = first["job_id"]
        assert "in the allocation" in res.stdout
        # the script's srun ran as a step of the held allocation
        steps = subprocess.run(
            ["sacct", "-n", "-P", "-j", alloc, "-o", "JobID"], capture_output=True, text=True
        ).stdout.split()
        assert f"{alloc}.0" in steps, steps
        state = json.loads(state_file.read_text())
        assert set(state) == ALLOC_KEYS
        assert (state["job_id"], state["partition"], state["account"]) == (alloc, "cpu", "tsb")
        assert queued(alloc) == "RUNNING"
        assert (live.root / "p1" / "custom_custom.log").is_file()
        name = subprocess.run(
            ["squeue", "-h", "-j", alloc, "-o", "%j"], capture_output=True, text=True
        ).stdout.strip()
        assert name == "tsb-trtllm.persistent"

        # a second job reuses it; a hang stops the steps, not the allocation
        res = cli("run", str(live.request("p2", "echo hang detected; sleep 60")), "--persistent", "--poll", POLL, "--json")  # fmt: skip
        assert (res.code, res.json["verdict"], res.json["job_id"]) == (14, "HANG_DETECTED", alloc)
        assert "reusing allocation" in res.stderr
        assert queued(alloc) == "RUNNING"

        # another account does not fit: the old one is cancelled, a new one made
        res = cli("run", str(live.request("p3", "exit 4", account="tsb2")), "--persistent", "--poll", POLL, "--json")  # fmt: skip
        assert (res.code, res.json["verdict"], res.json["exit_code"]) == (1, "FAILED", 4)
        new = res.json["job_id"]
        assert new != alloc and "not reusing allocation" in res.stderr
        assert sacct_state(alloc) == "CANCELLED"

        res = cli("release", str(live.root / "p3"))
        assert res.code == 0 and f"released allocation {new}" in res.stdout
        assert not state_file.exists()
        assert sacct_state(new) == "CANCELLED"
        assert cli("release", "--repo-root", str(live.repo)).stdout.startswith("no allocation")
    finally:
        cli("release", "--repo-root", str(live.repo))


def test_persistent_needs_a_persistent_build(live: Live) -> None:
    res = cli("build", str(live.request("np", "true", persistent_mode=False)))
    assert res.code == 0
    res = cli("submit", str(live.root / "np"), "--persistent")
    assert res.code == 2 and "persistent" in res.stderr


# ---------------------------------------------------------------- remote, over OpenSSH


def test_remote_probe_submit_watch(live: Live, sshd_loopback: LoopbackSshd) -> None:
    env_file = live.root / "slurm_env_remote.json"
    res = cli("probe", "--ssh", sshd_loopback.host, "--output", str(env_file))
    assert res.code == 0, res.stderr
    env = json.loads(env_file.read_text())
    assert (env["ssh_host"], env["remote_cwd"], env["user"]) == (
        sshd_loopback.host,
        "/root",
        "root",
    )
    assert env["default_partition"] == "gpu" and env["errors"] == []
    assert any(sshd_loopback.control.iterdir())  # the ControlMaster socket

    remote_work = live.root / "remote_work"  # another folder: the files must be copied there
    req = live.remote_request(
        "remote",
        "echo remote from $(pwd); echo '2 passed'",
        env_file,
        remote_work_dir=str(remote_work),
    )
    res = cli("run", str(req), "--poll", POLL, "--json")
    assert res.code == 0, res.stderr
    v = res.json
    assert (v["verdict"], v["state"], v["host"]) == ("PASSED", "COMPLETED", sshd_loopback.host)
    assert f"remote from {live.repo}" in res.stdout
    assert f"copied 2 file(s) to {sshd_loopback.host}:{remote_work}" in res.stderr
    job = v["job_id"]
    assert sorted(p.name for p in remote_work.iterdir()) == sorted(
        ["custom_custom.slurm", "slurm_run_custom.sh", f"custom_custom_{job}.out", f"custom_custom_{job}.err"]
    )  # fmt: skip
    assert not list((live.root / "remote").glob("*.out"))  # the log stayed remote

    # a failure is read from the remote .err file; --ssh-host overrides the job_spec's host
    fail = live.remote_request(
        "remote_fail",
        "python3 -c 'raise SystemExit(\"Traceback: remote boom\")'",
        env_file,
        remote_work_dir=str(live.root / "remote_work_2"),
    )
    res = cli("run", str(fail), "--poll", POLL, "--json", "--ssh-host", sshd_loopback.host)
    v = res.json
    assert (res.code, v["verdict"], v["exit_code"]) == (1, "FAILED", 1)
    assert any("Traceback: remote boom" in e for e in v["evidence"]), v
    res = cli("submit", str(live.root / "remote_fail"), "--force", "--ssh-host", "nohost.invalid")
    assert res.code == 3 and "ssh nohost.invalid" in res.stderr


# ---------------------------------------------------------------- Slurm's own TIMEOUT (last)


def test_slurm_time_limit_is_timeout(live: Live, overtime: str) -> None:
    res = cli("watch", str(live.root / "overtime"), "--poll", "0.5", "--json", "--timeout", "110")
    v = res.json
    assert (res.code, v["verdict"], v["state"], v["job_id"]) == (11, "TIMEOUT", "TIMEOUT", overtime)
    assert v["cancelled_by_watch"] is None
    assert any("DUE TO TIME LIMIT" in e for e in v["evidence"]), v
