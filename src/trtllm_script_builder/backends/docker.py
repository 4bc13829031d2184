"""The Docker backend: `bash docker_cmd.sh` started here in the background (pid and start time
recorded), followed by pid and the exit-status file its wrapper writes; stopping it kills its
process group and the container it named."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtllm_script_builder.resolve.backend import Backend, refuse_options, register_backend

if TYPE_CHECKING:
    from trtllm_script_builder.model.jobspec import JobSpec
    from trtllm_script_builder.process.check import Checked
    from trtllm_script_builder.process.follow import Followed
    from trtllm_script_builder.process.host import Host
    from trtllm_script_builder.process.submission import Submission, Undo


def gpus_here() -> tuple[int, str] | None:
    """This machine's GPUs as `nvidia-smi -L` lists them (one `GPU n: ...` line each) and the
    words saying so; None when it is not here, fails or lists none."""
    from trtllm_script_builder.process.proc import run

    smi = run(["nvidia-smi", "-L"], timeout=30)
    if not smi.found or smi.rc != 0:
        return None
    count = sum(1 for line in smi.out.splitlines() if line.startswith("GPU "))
    return (count, f"nvidia-smi -L on this machine lists {count}") if count else None


def _host(spec: JobSpec, override: str | None = None) -> Host:
    from trtllm_script_builder.process.host import Here

    refuse_options(spec, ssh_host=override)
    return Here()


def submit(spec: JobSpec, work_dir: Path, **_: Any) -> Submission:
    from trtllm_script_builder.process.submission import recorded

    return recorded(work_dir, lambda undo: _start(spec, work_dir, undo))


def _start(spec: JobSpec, work_dir: Path, undo: Undo) -> Submission:
    import socket

    from trtllm_script_builder.process.proc import kill_group, spawn_detached, start_time
    from trtllm_script_builder.process.submission import RC_FILE, Submission, now, script_of

    script = script_of(spec)
    log = Path(spec.log_file or work_dir / f"{spec.model_name}_local.log")
    rc_file = work_dir / RC_FILE
    pid = spawn_detached(script, log, rc_file, cwd=work_dir)
    undo.append(lambda: kill_group(pid))
    return Submission(
        scenario=spec.execution_scenario,
        work_dir=str(work_dir),
        submitted_at=now(),
        host=socket.gethostname(),
        script=str(script),
        pid=pid,
        pid_start=start_time(pid),
        rc_file=str(rc_file),
        log_file=str(log),
        container_name=_docker_name(spec.docker_cmd),
    )


def _docker_name(docker_cmd: str | None) -> str | None:
    if not docker_cmd:
        return None
    try:
        words = shlex.split(docker_cmd)
    except ValueError:
        return None
    for i, w in enumerate(words[:-1]):
        if w == "--name":
            return words[i + 1]
        if w.startswith("--name="):
            return w.partition("=")[2]
    return None


def followed(spec: JobSpec, sub: Submission, ssh_host: str | None) -> Followed:
    from trtllm_script_builder.process.follow import EachPoller, Followed
    from trtllm_script_builder.process.handles import LocalProcess
    from trtllm_script_builder.process.host import Here

    return Followed(LocalProcess.of(sub), EachPoller(), Here(), [])


def check(spec: JobSpec, work_dir: Path, *, host: Host | None = None, **_: Any) -> Checked:
    """Docker answers and nvidia-smi lists the GPUs the job needs, on this machine."""
    from trtllm_script_builder.process.check import EXIT_OK, EXIT_PROBLEMS, Checked
    from trtllm_script_builder.process.check.docker import WHERE, check_docker
    from trtllm_script_builder.process.host import Here

    found = check_docker(spec.required_devices, host or Here())
    return Checked(found, EXIT_PROBLEMS if found else EXIT_OK, place=WHERE)


def _steps(spec: JobSpec) -> tuple[str, str]:
    run = f"bash {Path(spec.script_path).name} in the background"
    return "docker answers, nvidia-smi lists the GPUs", run


DOCKER = register_backend(
    Backend(
        "docker",
        ("local_docker",),
        queued=False,
        steps=_steps,
        submit=submit,
        followed=followed,
        host=_host,
        check=check,
    )
)
