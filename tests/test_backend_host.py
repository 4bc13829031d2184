"""The backend registry picks the backend and the host from a job's scenario, and the work done
on a host (here a git sync) is the same code whichever host it is."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.model.registry import BACKENDS
from trtllm_script_builder.process.gitsync import sync_checkout
from trtllm_script_builder.process.host import Here, Host, OverSsh
from trtllm_script_builder.process.ssh import SshTarget
from trtllm_script_builder.resolve.backend import Backend, backend_of, scenarios_where

from .conftest import job_spec

DOCKER, SLURM = "docker", "slurm"


def host_of(spec: JobSpec, override: str | None = None) -> Host:
    return backend_of(spec.execution_scenario).host(spec, override)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("scenario", "backend", "remote"),
    [("local_docker", DOCKER, False), ("local_slurm", SLURM, False), ("remote_slurm", SLURM, True)],
)
def test_each_scenario_names_its_backend_and_host(
    scenario: str, backend: str, remote: bool
) -> None:
    spec = job_spec(execution_scenario=scenario, ssh_host="login1")
    assert backend_of(scenario).name == backend
    host = host_of(spec)
    assert isinstance(host, OverSsh if remote else Here) and host.remote == remote
    assert host.ssh_host == ("login1" if remote else None)


def test_the_ssh_host_comes_from_the_flag_then_the_job_then_its_cluster_file() -> None:
    spec = job_spec(execution_scenario="remote_slurm", ssh_host=None, slurm_env=None)
    with pytest.raises(BuildError, match="name no ssh_host"):
        host_of(spec)
    assert host_of(spec, "flag").ssh_host == "flag"
    env = {"ssh_host": "from-env"}
    assert host_of(job_spec(execution_scenario="remote_slurm", slurm_env=env)).name == "from-env"
    both = job_spec(execution_scenario="remote_slurm", ssh_host="job", slurm_env=env)
    assert host_of(both).name == "job" and host_of(both, "flag").name == "flag"


def test_an_ssh_host_for_a_job_that_runs_here_is_refused() -> None:
    with pytest.raises(BuildError, match="the job is local_slurm") as err:
        host_of(job_spec(execution_scenario="local_slurm"), "far.example.com")
    assert err.value.field == "ssh_host" and err.value.exit_code == 2


def queued(b: Backend, _: str) -> bool:
    return b.queued


def test_a_scenario_no_backend_registered_is_refused_not_taken_for_slurm() -> None:
    with pytest.raises(BuildError, match="no backend runs kubernetes jobs"):
        backend_of("kubernetes")
    third = Backend(name="kubernetes", scenarios=("kubernetes",), queued=True)
    BACKENDS.register("kubernetes", third)
    try:
        assert backend_of("kubernetes") is third
        # messages that list the Slurm-like scenarios are built from the registry
        assert scenarios_where(queued) == "local_slurm or remote_slurm or kubernetes"
    finally:
        BACKENDS.unregister("kubernetes")
    assert scenarios_where(queued) == "local_slurm or remote_slurm"


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def test_a_sync_to_a_folder_here_runs_the_same_steps_as_over_ssh(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (repo / "a.txt").write_text("two\n")  # uncommitted: it travels as a snapshot
    clone = tmp_path / "cluster" / "TensorRT-LLM"
    result = sync_checkout(Here(), repo, str(clone), submodules=False)
    assert (result.method, result.snapshot) == ("bundle", True)
    assert _git(clone, "rev-parse", "HEAD") == result.commit
    assert (clone / "a.txt").read_text() == "two\n"
    assert _git(repo, "status", "--porcelain") == "M a.txt"  # the checkout is only read
    again = sync_checkout(Here(), repo, str(clone), submodules=False)
    assert (again.commit, again.method) == (result.commit, "present")


# ---------------------------------------------------------------- the ssh control folder

OTHER_UID = 65534  # nobody: another user of this machine


@pytest.fixture()
def short_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A sticky world-writable TMPDIR short enough for socket paths (as /tmp), and a HOME
    whose ~/.ssh/tsb-control is too long for one (a long cluster home path)."""
    base = Path(tempfile.mkdtemp(prefix="tsb-t", dir="/tmp"))
    base.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setenv("HOME", str(tmp_path / ("long-home-" * 8)))
    monkeypatch.delenv("TSB_SSH_CONTROL_DIR", raising=False)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def refusal(host: str = "login.example.com") -> str:
    with pytest.raises(BuildError) as err:
        OverSsh(host).shell("true")
    assert err.value.exit_code == 2 and "\n" not in err.value.line()
    return err.value.line()


def test_a_long_home_uses_a_private_folder_in_tmpdir(short_tmp: Path) -> None:
    argv = SshTarget("login.example.com").line_argv("true")
    mine = short_tmp / f"tsb-ssh-{os.getuid()}"
    assert any(a.startswith(f"ControlPath={mine}/") for a in argv)
    st = mine.lstat()
    assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700


def test_a_socket_folder_another_user_made_first_is_refused(short_tmp: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to make a folder of another user's")
    planted = short_tmp / f"tsb-ssh-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    assert refusal() == (
        f"error: ssh_host: {planted} is not a private folder of yours (owned by uid "
        f"{OTHER_UID}): another user could take over the ssh connection through it; remove "
        "it, or set TSB_SSH_CONTROL_DIR to a short folder of yours with mode 0700"
    )
    assert list(planted.iterdir()) == []


def test_a_socket_folder_that_is_a_link_or_open_to_others_is_refused(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = short_tmp / "real"
    real.mkdir(mode=0o700)
    link = short_tmp / "link"
    link.symlink_to(real)
    monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(link))
    assert "(a symbolic link)" in refusal()
    real.chmod(0o755)
    monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(real))
    assert "(mode 755, not 700)" in refusal()
    monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(short_tmp / ("x" * 90)))
    assert "is longer than" in refusal()


def test_a_long_socket_folder_gets_a_short_socket_name(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ssh's `%C` (40 hex digits) where it fits, else a 16-digit hash: the path ssh binds,
    with its 17-character temporary suffix, fits a 104-byte socket path."""
    for length, name in ((20, "%C"), (60, "[0-9a-f]{16}")):
        folder = short_tmp / ("d" * (length - len(str(short_tmp)) - 1))
        monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(folder))
        argv = SshTarget("login.example.com").line_argv("true")
        path = next(a for a in argv if a.startswith("ControlPath=")).removeprefix("ControlPath=")
        assert re.fullmatch(f"{re.escape(str(folder))}/{name}", path)
        assert len(path.replace("%C", "c" * 40)) + 17 < 104


def test_remote_lines_run_under_sh_whatever_the_login_shell(tmp_path: Path) -> None:
    """What ssh gives the login shell: tcsh (a cluster account's shell) and bash run it
    alike, under `sh`, with quotes, `!`, `$` and newlines as written."""
    line = "printf '%s|' \"$0\" 'a b' \"it's\" '!x' \"$((1 + 2))\"\necho '<>&;`'"
    want = "sh|a b|it's|!x|3|<>&;`\n"
    for shell in ("bash", "tcsh"):
        if shutil.which(shell) is None:
            pytest.skip(f"{shell} is not installed")
        argv = SshTarget("login.example.com").line_argv(line)
        ran = subprocess.run([shell, "-c", argv[-1]], capture_output=True, text=True)
        assert (ran.stdout, ran.returncode) == (want, 0), (shell, ran.stderr)
