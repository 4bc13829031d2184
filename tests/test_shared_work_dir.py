"""A work_dir other people can write to (a team's shared folder): what is read back from it is not
followed through links nor left to block on a pipe, a recorded pid is signalled only while it is
still the process submit started, and verdicts that quote the log are the owner's alone
(decision shared-work-dir). Local Docker jobs through the `docker` stand-in of
test_runner_docker; `cancel` of such a job by its folder."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process.handles import LocalProcess
from trtllm_script_builder.process.host import Here
from trtllm_script_builder.process.proc import alive, start_time
from trtllm_script_builder.process.submission import load_submission

from .conftest import Env
from .test_runner_docker import docker, last_json, run_cli

__all__ = ["docker", "run_cli"]  # fixtures, used here by name

SECRET = "machine example.com login me password hunter2"


@pytest.fixture()
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """Another process of the same user, leading its own process group."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _submitted(run_cli: Callable[..., Any], env: Env, cmd: str) -> dict[str, Any]:
    code, out, err = run_cli("run", cmd, "--poll", "0.1", "--timeout", "0.01", "--keep-running")
    assert code in (0, 11), err
    data: dict[str, Any] = json.loads((env.work / "submission.json").read_text())
    return data


def _in_time(work: Callable[[], object], seconds: float) -> bool:
    """Whether `work` returned within `seconds` (a thread: a blocked open cannot be cut)."""
    done = threading.Event()

    def go() -> None:
        work()
        done.set()

    threading.Thread(target=go, daemon=True).start()
    return done.wait(seconds)


def test_a_verdict_is_readable_by_its_owner_only(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    code, _, err = run_cli("run", 'echo "1 passed in 0.1s"', "--poll", "0.1")
    assert code == 0, err
    mode = stat.S_IMODE((env.work / "verdict.json").stat().st_mode)
    assert mode & 0o077 == 0, oct(mode)


def test_a_log_linked_to_a_secret_is_not_read(
    env: Env, docker: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    secret = tmp_path / "netrc"
    secret.write_text(SECRET + "\n")
    sub = _submitted(run_cli, env, "sleep 2; echo done")
    log = Path(sub["log_file"])
    log.unlink()
    log.symlink_to(secret)  # a teammate's link in the shared folder
    code, out, err = run_cli("watch", None, str(env.work), "--poll", "0.1", "--json")
    assert "hunter2" not in out + err
    assert "hunter2" not in (env.work / "verdict.json").read_text()
    assert Here().read_from(str(log), 0) is None


def test_a_named_pipe_for_a_log_does_not_block_watch(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    sub = _submitted(run_cli, env, "true")
    log = Path(sub["log_file"])
    log.unlink()
    os.mkfifo(log)  # no writer: an open without O_NONBLOCK waits for ever
    assert _in_time(lambda: Here().read_from(str(log), 0), 10)
    assert _in_time(
        lambda: run_cli("watch", None, str(env.work), "--poll", "0.1", "--timeout", "5"), 30
    )


def test_a_rewritten_pid_is_not_signalled(
    env: Env, docker: Path, run_cli: Callable[..., Any], bystander: subprocess.Popen[bytes]
) -> None:
    sub = _submitted(run_cli, env, "sleep 30")
    ours = sub["pid"]
    # the record names another process, with no start time to tell it by
    sub["pid"] = bystander.pid
    del sub["pid_start"]
    (env.work / "submission.json").write_text(json.dumps(sub))
    run_cli("watch", None, str(env.work), "--poll", "0.1", "--timeout", "0.5")
    assert alive(bystander.pid, None)
    code, out, err = run_cli("cancel", None, str(env.work))
    assert code == 0, err
    assert alive(bystander.pid, None)
    assert out.startswith(f"already ended: pid {bystander.pid}"), out
    os.killpg(ours, signal.SIGKILL)


def test_a_pid_with_another_start_time_is_not_signalled(
    bystander: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    started = start_time(bystander.pid)
    assert started is not None
    other = LocalProcess(bystander.pid, str(int(started) + 1), None, str(tmp_path / "log"), "h")
    other.cancel()
    other.overdue()
    assert other.refresh()  # not ours: ended, as far as this record goes
    assert alive(bystander.pid, started)
    same = LocalProcess(bystander.pid, started, None, str(tmp_path / "log"), "h")
    same.cancel()
    bystander.wait(10)
    assert not alive(bystander.pid, None)


def test_cancel_stops_a_docker_job_by_its_folder(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    sub = _submitted(run_cli, env, "sleep 30")
    code, out, err = run_cli("cancel", None, str(env.work))
    assert code == 0, err
    assert out.startswith(f"cancelled pid {sub['pid']}"), out
    deadline = time.monotonic() + 10
    while alive(sub["pid"], sub["pid_start"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(sub["pid"], sub["pid_start"])
    code, out, _ = run_cli("watch", None, str(env.work), "--poll", "0.1", "--json")
    assert (code, last_json(out)["verdict"]) == (12, "CANCELLED")


def test_a_linked_submission_record_is_refused(env: Env, tmp_path: Path) -> None:
    env.work.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "record.json"
    elsewhere.write_text("{}")
    (env.work / "submission.json").symlink_to(elsewhere)
    with pytest.raises(BuildError, match="is not a regular file"):
        load_submission(env.work)
    res = CliRunner().invoke(main, ["cancel", str(env.work)])
    assert res.exit_code == 2 and "submission.json is not a regular file" in res.stderr


def test_the_timeout_is_kept_whatever_the_poll(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    """--timeout bounds watch's wall time: a poll longer than the timeout is cut at it."""
    started = time.monotonic()
    code, out, err = run_cli("run", "sleep 60", "--poll", "30", "--timeout", "1", "--json")
    assert (code, last_json(out)["verdict"]) == (11, "TIMEOUT"), err
    assert time.monotonic() - started < 20


def test_two_submits_of_one_folder_at_once_start_one_job(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    import fcntl

    code, _, err = run_cli("run", "true", "--poll", "0.1")
    assert code == 0, err
    (env.work / "submission.json").unlink()  # built, not submitted
    with open(env.work / ".submit.lock", "a") as held:  # another submit of it runs
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = run_cli("submit", None, str(env.work))
        assert code == 2, err
        assert "is being submitted by another process" in err
        assert not (env.work / "submission.json").exists()
    code, _, err = run_cli("submit", None, str(env.work))
    assert code == 0, err
