"""submit / watch / run for local_docker, through a `docker` stand-in (no Docker engine here),
and the pure parts of the runner (ssh command lines, submission records)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.process.proc import alive
from trtllm_script_builder.process.ssh import SshTarget, control_dir, remote_line
from trtllm_script_builder.resolve.job import docker_container_name as container_name

from .conftest import HERE, Env

DOCKER_STAND_IN = HERE / "fixtures" / "docker_stand_in.py"


def last_json(text: str) -> dict[str, Any]:
    lines = text.strip().splitlines()
    data: dict[str, Any] = json.loads(lines[-1])
    return data


@pytest.fixture()
def docker(env: Env, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in on PATH as `docker`; returns its record file."""
    bin_dir = env.root / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(DOCKER_STAND_IN)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    record = env.root / "docker_record.jsonl"
    monkeypatch.setenv("DOCKER_STAND_IN_RECORD", str(record))
    return record


@pytest.fixture()
def run_cli(env: Env) -> Callable[..., tuple[int, str, str]]:
    def go(cmd: str, custom_cmd: str | None = None, *args: str) -> tuple[int, str, str]:
        argv = [cmd]
        if cmd == "run":
            req = env.request(
                "local_docker",
                custom_cmd=custom_cmd,
                container_image="nvcr.io/test/trtllm:x86_64-1",
                skip_install=True,
            )
            path = env.root / "request.json"
            path.write_text(json.dumps(req))
            argv.append(str(path))
        res = CliRunner().invoke(main, [*argv, *args])
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        return res.exit_code, res.stdout, res.stderr

    return go


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_docker_job_passes(env: Env, docker: Path, run_cli: Callable[..., Any]) -> None:
    code, out, err = run_cli(
        "run", 'echo "1 passed in 0.1s"; echo "$LLM_MODELS_ROOT"', "--poll", "0.1", "--json"
    )
    assert code == 0, err
    result = last_json(out)
    assert (result["verdict"], result["exit_code"], result["state"]) == ("PASSED", 0, None)
    assert "1 passed in 0.1s" in out  # streamed
    spec = json.loads((env.work / "job_spec.json").read_text())
    log = Path(spec["log_file"])
    assert log.read_text().splitlines() == ["1 passed in 0.1s", "/models"]
    sub = json.loads((env.work / "submission.json").read_text())
    assert sub["scenario"] == "local_docker" and sub["pid"] == result["pid"]
    assert json.loads((env.work / "verdict.json").read_text())["verdict"] == "PASSED"
    (call,) = records(docker)
    assert call["image"] == "nvcr.io/test/trtllm:x86_64-1"
    assert ["--rm", None] in call["options"] and call["command"][:2] == ["bash", "-c"]
    assert str(env.repo) in call["mounts"]
    # the same work_dir is not submitted twice, unless --force
    code, _, err = run_cli("submit", None, str(env.work))
    assert code == 2 and "already submitted" in err and "--force" in err
    code, out, _ = run_cli("submit", None, str(env.work), "--force", "--json")
    assert code == 0 and json.loads(out)["pid"] != sub["pid"]
    code, _, _ = run_cli("watch", None, str(env.work), "--poll", "0.1", "--quiet")
    assert code == 0


def test_docker_job_fails(env: Env, docker: Path, run_cli: Callable[..., Any]) -> None:
    code, out, _ = run_cli(
        "run", "echo 'Traceback (most recent call last):'; exit 3", "--poll", "0.1", "--json"
    )
    result = last_json(out)
    assert (code, result["verdict"], result["exit_code"]) == (1, "FAILED", 3)
    assert any("Traceback" in e for e in result["evidence"])


def test_docker_hang_stops_the_container(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    t0 = time.monotonic()
    code, out, err = run_cli(
        "run",
        "echo working; echo 'Hang detected: no progress'; sleep 60",
        "--poll",
        "0.1",
        "--json",
    )
    result = last_json(out)
    assert (code, result["verdict"], result["cancelled_by_watch"]) == (14, "HANG_DETECTED", "hang")
    assert time.monotonic() - t0 < 20
    assert "'hang detected' in the log" in err
    assert not alive(result["pid"], None)
    name = container_name("custom_custom", str(env.work))  # the container of this job folder
    assert {"cmd": "kill", "args": [name]} in records(docker)


def test_docker_watch_timeout(env: Env, docker: Path, run_cli: Callable[..., Any]) -> None:
    code, out, _ = run_cli("run", "sleep 60", "--poll", "0.1", "--timeout", "1", "--json")
    result = last_json(out)
    assert (code, result["verdict"], result["timed_out"]) == (11, "TIMEOUT", True)
    assert not alive(result["pid"], None)


def test_docker_that_cannot_start_is_infra(
    env: Env, docker: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mount source gone by run time (the build checks the models path, not the home folder).
    monkeypatch.setenv("HOME", str(env.root / "gone"))
    code, out, _ = run_cli("run", "true", "--poll", "0.1", "--json")
    result = last_json(out)
    assert (code, result["verdict"], result["exit_code"]) == (10, "INFRA_FAILURE", 125)
    assert any("bind source path does not exist" in e for e in result["evidence"])


def test_watch_needs_a_submission(env: Env, run_cli: Callable[..., Any]) -> None:
    code, _, err = run_cli("watch", None, str(env.work))
    assert code == 2 and "no job_spec.json" in err
    env.work.mkdir(exist_ok=True)
    (env.work / "job_spec.json").write_text("{}")
    code, _, err = run_cli("submit", None, str(env.work))
    assert code == 2 and "job_spec.json" in err


# ---------------------------------------------------------------- pure helpers


def test_ssh_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="tsb-ssh-t", dir="/tmp"))  # short: a socket path
    short = base / "cm"
    monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(short))
    monkeypatch.setenv("TSB_SSH_CONFIG", "/etc/tsb/ssh_config")
    try:
        t = SshTarget("login.example.com")
        argv = t.argv(["sbatch", "--parsable", "/w d/job's.slurm"], cwd="/w d")
        assert argv[:3] == ["ssh", "-F", "/etc/tsb/ssh_config"]
        assert f"ControlPath={short}/%C" in argv
        assert "ControlMaster=auto" in argv and "BatchMode=yes" in argv
        assert argv[-3:-1] == ["login.example.com", "--"]
        line = "cd -- '/w d' && sbatch --parsable '/w d/job'\"'\"'s.slurm'"
        # run by `sh` there whatever the login shell: the line travels as octal escapes
        head, esc, tail = argv[-1].split('"')[1:4]
        assert (head, tail) == ("$(printf %b ", ")")
        decoded = subprocess.run(["sh", "-c", f'printf %b "{esc}"'], capture_output=True)
        assert decoded.stdout.decode() == line
        assert short.stat().st_mode & 0o777 == 0o700
        assert remote_line(["tail", "-c", "+1", "a b"]) == "tail -c +1 'a b'"
        assert t.control_argv("exit")[-3:] == ["-O", "exit", "login.example.com"]
    finally:
        shutil.rmtree(base)
    # a folder too long for a socket path falls back to $TMPDIR/tsb-ssh-<uid>
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setenv("HOME", str(tmp_path / ("x" * 80)))
    monkeypatch.delenv("TSB_SSH_CONTROL_DIR")
    try:
        assert control_dir() == base / f"tsb-ssh-{os.getuid()}"
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize(
    ("flag", "value", "ok"),
    [
        ("--gpus", '"device=0,1"', True),
        ("--gpus", "all", True),
        ("--gpus", "2", True),
        ("--gpus", "device=0,1", False),  # unquoted: device 0 plus a count, refused
        ("--gpus", "devices=0", False),
        ("--ulimit", "memlock=-1", True),
        ("--ulimit", "stack=67108864", True),
        ("--ulimit", "stack", False),
        ("--ulimit", "memlocks=-1", False),
        ("--ulimit", "nofile=10:5", False),
    ],
)
def test_stand_in_parses_gpus_and_ulimit_as_docker_does(flag: str, value: str, ok: bool) -> None:
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, str(DOCKER_STAND_IN), "run", "--rm", flag, value, "img", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (res.returncode == 0) is ok, res.stderr
    if not ok:
        assert res.returncode == 125 and res.stderr.startswith("docker: ")
