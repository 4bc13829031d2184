"""Fixtures for tests against the live test cluster (`bash tests/slurm/cluster.sh up`).

Every test marked `slurm` goes through the `slurm_cluster` fixture: it skips the test when no
cluster answers or when the cluster that answers is not the project's own test cluster (a login
node of a real cluster: the suite never submits there), and fails it instead when
TSB_REQUIRE_SLURM=1 (CI, where cluster.sh up ran before pytest).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

STATE = Path(os.environ.get("TSB_SLURM_STATE", "/var/lib/tsb-slurm"))
# How the test cluster is recognised: the name cluster.sh gives it, its controller on this
# machine's loopback, and the first line cluster.sh writes into its config.
CLUSTER_NAME = "tsb"
CONF_MARK = "# written by tests/slurm/cluster.sh"


@dataclass(frozen=True)
class JobResult:
    job_id: str
    state: str  # COMPLETED, FAILED, ...
    exit_code: str  # "0:0"
    output: str  # stdout and stderr of the batch script (one file)


@dataclass(frozen=True)
class SlurmCluster:
    """The cluster cluster.sh builds: names and a helper to run a batch script to its end."""

    gpu_partition: str = "gpu"  # default partition, gpu_nodes, Gres=gpu:8 each, MaxTime 04:00:00
    cpu_partition: str = "cpu"  # cpunode, no GRES, MaxTime 01:00:00
    gpu_nodes: tuple[str, ...] = ("gpunode1", "gpunode2")
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
    return not_ours(conf)


def not_ours(conf: Path) -> str | None:
    """Why the cluster that answers is not the project's test cluster, or None when it is."""
    first = conf.read_text(errors="replace").partition("\n")[0].strip()
    if first != CONF_MARK:
        return f"{conf} was not written by tests/slurm/cluster.sh; live tests submit only to it"
    try:
        res = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=15, check=False
        )
    except subprocess.TimeoutExpired:
        return "scontrol does not answer"
    config = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition("=") for ln in res.stdout.splitlines())
    )
    name = config.get("ClusterName")
    if name != CLUSTER_NAME:
        return f"the cluster answering is {name!r}, not the test cluster {CLUSTER_NAME!r}"
    host = config.get("SlurmctldHost[0]", "")
    if not any(f"({a})" in host or host == a for a in ("127.0.0.1", "localhost", "::1")):
        return f"the cluster's controller {host!r} is not on this machine's loopback"
    return None


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    reason = cluster_missing()
    if reason is not None:
        if os.environ.get("TSB_REQUIRE_SLURM") == "1":
            pytest.fail(f"TSB_REQUIRE_SLURM=1 but no test cluster: {reason}")
        pytest.skip(f"no test cluster ({reason}); run: bash tests/slurm/cluster.sh up")
    return SlurmCluster()


@pytest.fixture(autouse=True)
def _only_the_test_cluster(request: pytest.FixtureRequest) -> None:
    """A test marked `slurm` runs only where `slurm_cluster` found the test cluster, whether
    or not it asks for the fixture itself."""
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("slurm_cluster")


# ---------------------------------------------------------------- a real sshd on loopback


@dataclass(frozen=True)
class LoopbackSshd:
    host: str  # an alias in `config`
    config: Path  # the client's ssh config (pass as TSB_SSH_CONFIG)
    port: int
    control: Path  # TSB_SSH_CONTROL_DIR: where the ControlMaster sockets go
    down: str = "tsb-nowhere"  # another alias in `config`: a closed port on 127.0.0.1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _skip_sshd(reason: str) -> None:
    """Skip the remote tests, or fail them where sshd must work (TSB_REQUIRE_SSHD=1, CI)."""
    if os.environ.get("TSB_REQUIRE_SSHD") == "1":
        pytest.fail(f"TSB_REQUIRE_SSHD=1 but {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def loopback_sshd(
    root: Path, session_env: Mapping[str, str] | None = None
) -> Iterator[LoopbackSshd]:
    """A real OpenSSH server on 127.0.0.1 (root login with a key made here) in front of the
    test cluster; the client side uses a private ssh config (no known_hosts checks) and a
    short ControlPath folder. TSB_SSH_CONFIG and TSB_SSH_CONTROL_DIR are set while it runs.
    `session_env` is set in every ssh session (sshd's SetEnv, PATH too): what a cluster's
    login shell would have, e.g. the stand-ins first on PATH, which sbatch passes to jobs."""
    binary = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(binary) or shutil.which("ssh") is None:
        _skip_sshd("OpenSSH is not installed (apt-get install -y openssh-server openssh-client)")
    d = root / "sshd"
    d.mkdir()
    for key in ("host_key", "user_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True
        )
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\n"
        + (  # one SetEnv line: sshd takes the first of several
            "SetEnv " + " ".join(f"{k}={v}" for k, v in session_env.items()) + "\n"
            if session_env
            else ""
        )
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    server = subprocess.Popen(
        [binary, "-D", "-f", str(d / "sshd_config"), "-E", str(d / "sshd.log")],
        stdin=subprocess.DEVNULL,
    )
    common = (
        f"  HostName 127.0.0.1\n  User root\n  IdentityFile {d}/user_key\n  IdentitiesOnly yes\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )
    config = d / "ssh_config"
    config.write_text(
        f"Host tsb-loopback\n  Port {port}\n{common}"
        f"Host tsb-nowhere\n  Port {free_port()}\n{common}"  # LoopbackSshd.down
    )
    control = Path(tempfile.mkdtemp(prefix="tsb-ssh-test-", dir="/tmp"))  # a short socket path
    try:
        for _ in range(50):
            hello = subprocess.run(
                ["ssh", "-F", str(config), "-o", "BatchMode=yes", "tsb-loopback", "true"],
                capture_output=True,
                check=False,
            )
            if hello.returncode == 0 or server.poll() is not None:
                break
            time.sleep(0.1)
        if hello.returncode != 0:
            log = (d / "sshd.log").read_text() if (d / "sshd.log").exists() else ""
            _skip_sshd(f"sshd could not be started on 127.0.0.1:{port}: {log.strip()[-300:]}")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TSB_SSH_CONFIG", str(config))
            mp.setenv("TSB_SSH_CONTROL_DIR", str(control))
            yield LoopbackSshd("tsb-loopback", config, port, control)
            from trtllm_script_builder.process.ssh import SshRunner, SshTarget

            SshRunner(SshTarget("tsb-loopback")).close()  # the ControlMaster, before its server
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(control, ignore_errors=True)


@pytest.fixture(scope="module")
def sshd_session_env() -> Mapping[str, str] | None:
    """The `session_env` of `sshd_loopback`: none; a test module overrides this fixture."""
    return None


@pytest.fixture(scope="module")
def sshd_loopback(
    tmp_path_factory: pytest.TempPathFactory, sshd_session_env: Mapping[str, str] | None
) -> Iterator[LoopbackSshd]:
    """`loopback_sshd` for one test module."""
    with loopback_sshd(tmp_path_factory.mktemp("sshd"), sshd_session_env) as sshd:
        yield sshd
