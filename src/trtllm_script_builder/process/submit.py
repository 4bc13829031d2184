"""`submit`: start a built job (sbatch, ssh + sbatch, bash docker_cmd.sh, or a held allocation)
and record it in WORK_DIR/submission.json."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from trtllm_script_builder.atomic import cleanly, signals_held
from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.chain import (
    ChainJob,
    dependency_args,
    has_compile,
    sbatch_with,
    submit_prerequisites,
)
from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import (
    CmdResult,
    Runner,
    kill_group,
    run,
    spawn_detached,
    start_time,
)
from trtllm_script_builder.process.slurm import submitted_id
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.ssh import SshRunner, SshTarget
from trtllm_script_builder.process.submission import (
    RC_FILE,
    SUBMISSION,
    Say,
    Submission,
    err_path,
    load_submission,
    log_path,
    save_submission,
    source_args,
    write_json,
)

__all__ = [
    "RC_FILE",
    "SUBMISSION",
    "Say",
    "Submission",
    "load_submission",
    "save_submission",
    "submit",
    "write_json",
]


def resolve_ssh_host(spec: JobSpec, override: str | None) -> str:
    host = override or spec.ssh_host or (spec.slurm_env or {}).get("ssh_host")
    if not host:
        raise BuildError(
            "ssh_host",
            "job_spec.json and its slurm_env name no ssh_host",
            "pass --ssh-host HOST (or probe the cluster with probe --ssh HOST)",
        )
    return str(host)


def refuse_ssh_host_off_remote(spec: JobSpec, ssh_host: str | None) -> None:
    """--ssh-host on a job that runs here would be ignored without a word: the user meant
    another job, or a remote build of this one."""
    if ssh_host and spec.execution_scenario != "remote_slurm":
        raise BuildError(
            "ssh_host",
            f"the job is {spec.execution_scenario}, which runs on this machine's cluster or Docker",
            "drop --ssh-host (it is for remote_slurm jobs)",
        )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def submit(
    work_dir: Path,
    *,
    force: bool = False,
    ssh_host: str | None = None,
    persistent: bool = False,
    alloc_time: str | None = None,
    say: Say = lambda _: None,
) -> Submission:
    """Start the job built in work_dir; refuses a work_dir already submitted unless `force`."""
    work_dir = work_dir.resolve()
    spec = read_job_spec(work_dir)
    previous = load_submission(work_dir)
    if previous is not None and not force:
        what = f"job {previous.job_id}" if previous.job_id else f"pid {previous.pid}"
        raise BuildError(
            "work_dir",
            f"{work_dir} was already submitted ({what}, {previous.submitted_at})",
            "watch it with `trtllm-script-builder watch`, or pass --force to submit it again",
        )
    scenario = spec.execution_scenario
    refuse_ssh_host_off_remote(spec, ssh_host)
    if persistent and scenario != "local_slurm":
        raise BuildError(
            "persistent", f"persistent mode is for local_slurm, not {scenario}", "drop --persistent"
        )
    if persistent and spec.prerequisites:
        raise BuildError(
            "persistent",
            "this job waits for a compile or image import job, which a held allocation cannot run first",
            "drop --persistent",
        )
    # What this run started, undone when it is interrupted or fails before its record is
    # written: a job nobody has a record of would run unwatched (decision 81).
    undo: list[Callable[[], object]] = []
    try:
        if scenario == "local_docker":
            sub = _submit_docker(spec, work_dir, undo)
        elif scenario == "remote_slurm":
            sub = _submit_remote(spec, work_dir, ssh_host, say, undo)
        elif persistent:
            from trtllm_script_builder.process.persistent import submit_persistent

            sub = submit_persistent(spec, work_dir, alloc_time, say)
        else:
            sub = _submit_local(spec, work_dir, undo)
        with signals_held():  # recorded, and then nothing of it is undone
            save_submission(work_dir, sub)
            undo.clear()
    except BaseException:

        def undo_all() -> None:
            while undo:
                undo.pop()()

        cleanly(undo_all)
        raise
    return sub


class _Noted:
    """A runner that notes each job its `sbatch` submitted; `undo` gets their one scancel."""

    def __init__(self, runner: Runner, undo: list[Callable[[], object]]) -> None:
        self.runner = runner
        self.jobs: list[str] = []
        undo.append(self.cancel)

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
        res = self.runner(argv, cwd)
        job = submitted_id(res) if argv[0] == "sbatch" and res.rc == 0 else None
        if job is not None:
            self.jobs.append(job)
        return res

    def cancel(self) -> None:
        if self.jobs:
            self.runner(["scancel", *self.jobs])
            self.jobs.clear()


def _script(spec: JobSpec) -> Path:
    script = Path(spec.script_path)
    if not script.is_file():
        raise BuildError(
            "script_path", f"{script} does not exist", "build the job again into this work_dir"
        )
    return script


def _submit_local(spec: JobSpec, work_dir: Path, undo: list[Callable[[], object]]) -> Submission:
    script = _script(spec)
    # Where the script's #SBATCH lines write: the folder the build wrote them for.
    base = spec.work_dir or str(work_dir)
    runner = _Noted(run, undo)
    chain = _submit_chain(spec, runner, work_dir, base, remote=False)
    res = runner(["sbatch", "--parsable", *dependency_args(chain), str(script)], cwd=work_dir)
    job = submitted_id(res) if res.rc == 0 else None
    if job is None:  # its prerequisites go again with the rest of `undo`
        raise ToolFailed(
            "sbatch",
            f"{first_line(res)}",
            f"check the job against the cluster: trtllm-script-builder check {work_dir}",
        )
    out = log_path(spec.log_file_pattern, job, base)
    return Submission(
        prerequisites=[c.to_json() for c in chain] or None,
        scenario="local_slurm",
        work_dir=str(work_dir),
        submitted_at=_now(),
        host=socket.gethostname(),
        script=str(script),
        job_id=job,
        log_file=out,
        err_file=log_path(spec.error_file_pattern, job, base) or err_path(out),
    )


def _submit_remote(
    spec: JobSpec,
    work_dir: Path,
    override: str | None,
    say: Say,
    undo: list[Callable[[], object]],
) -> Submission:
    host = resolve_ssh_host(spec, override)
    script = _script(spec)
    compiles = has_compile(spec)
    sync = _sync_for_compile(spec, work_dir, say) if compiles else None
    remote_dir = spec.remote_work_dir
    remote_script = spec.remote_script_path
    if not remote_dir or not remote_script:
        raise BuildError(
            "remote_work_dir",
            "job_spec.json has no remote_work_dir/remote_script_path",
            "build the job for remote_slurm again",
        )
    files = [script]
    for extra in spec.extra_files:
        p = Path(extra)
        if not p.is_file():
            raise BuildError(
                "extra_files", f"{p} does not exist", "build the job again into this work_dir"
            )
        files.append(p)
    target = SshTarget(host)
    runner = SshRunner(target)
    hello = runner.check()
    if hello.rc != 0:
        raise ToolFailed(
            "ssh_host",
            f"ssh {host}: {first_line(hello)}",
            "check the host name and that `ssh HOST true` works without a prompt "
            "(open a ControlMaster first for MFA hosts)",
        )
    # the commit the chain's jobs must find in the clone when they start (decision 72)
    commit = sync(target) if sync is not None else None
    if spec.remote_repo_path:
        repo = runner(["test", "-d", spec.remote_repo_path])
        if repo.rc != 0:
            say(
                f"warning: {spec.remote_repo_path} does not exist on {host}; "
                "the job mounts it (sync the repo there first)"
            )
    copied = runner.copy(files, remote_dir)
    if copied.rc != 0:
        raise ToolFailed(
            "remote_work_dir",
            f"copying to {host}:{remote_dir} failed: {first_line(copied)}",
            "check that the folder can be written",
        )
    say(f"copied {len(files)} file(s) to {host}:{remote_dir}")
    pin = source_args(commit)
    noted = _Noted(runner, undo)
    chain = _submit_chain(
        spec, noted, Path(remote_dir), remote_dir, remote=True, where=f"on {host}: ", extra=pin
    )
    res = noted(
        ["sbatch", "--parsable", *pin, *dependency_args(chain), remote_script],
        cwd=Path(remote_dir),
    )
    job = submitted_id(res) if res.rc == 0 else None
    if job is None:  # its prerequisites go again with the rest of `undo`
        raise ToolFailed(
            "sbatch", f"on {host}: {first_line(res)}", "check the job against that cluster"
        )
    out = log_path(spec.log_file_pattern, job, remote_dir)
    return Submission(
        prerequisites=[c.to_json() for c in chain] or None,
        scenario="remote_slurm",
        work_dir=str(work_dir),
        submitted_at=_now(),
        host=host,
        ssh_host=host,
        script=remote_script,
        remote_work_dir=remote_dir,
        job_id=job,
        log_file=out,
        err_file=log_path(spec.error_file_pattern, job, remote_dir) or err_path(out),
        source_commit=commit,
    )


def _submit_chain(
    spec: JobSpec,
    runner: Runner,
    cwd: Path,
    log_base: str,
    *,
    remote: bool,
    where: str = "",
    extra: list[str] | None = None,
) -> list[ChainJob]:
    """The job's prerequisites (decision 65), submitted before it; none for most jobs.
    `extra`: sbatch options for each of them (the synced commit, decision 72)."""
    if not spec.prerequisites:
        return []
    sbatch = sbatch_with(runner, cwd, where, extra or [])
    # A later sbatch that fails: those submitted so far go with submit's `undo` (decision 81).
    return submit_prerequisites(spec, sbatch, log_base, remote=remote)


def _sync_for_compile(spec: JobSpec, work_dir: Path, say: Say) -> Callable[[SshTarget], str | None]:
    """The step a remote compile chain takes first: the compile job builds remote_repo_path,
    so the local checkout's full state is brought there (decision 58) before anything is
    copied or submitted. The step gives the commit the clone is now at, which the chain's
    jobs check when they start (decision 72); None when remote_repo_path is the checkout
    itself (a shared filesystem: the jobs read its files as they are, not a commit)."""
    from trtllm_script_builder.process import gitsync

    assert spec.remote_repo_path is not None
    remote_repo = spec.remote_repo_path
    # `submit --force` submits again; discarding the clone's changes is `sync --force`'s job
    hint = (
        f"discard them with `trtllm-script-builder sync {shlex.quote(str(work_dir))} --force`, "
        "then submit again"
    )

    def sync(target: SshTarget) -> str | None:
        result = gitsync.sync_checkout(
            target, Path(spec.repo_root), remote_repo, say=say, force_hint=hint
        )
        say(
            f"synced {spec.repo_root} to {target.host}:{remote_repo} at {result.commit} ({result.method})"
        )
        return None if result.method == "shared" else result.commit

    return sync


def _submit_docker(spec: JobSpec, work_dir: Path, undo: list[Callable[[], object]]) -> Submission:
    script = _script(spec)
    log = Path(spec.log_file or work_dir / f"{spec.model_name}_local.log")
    rc_file = work_dir / RC_FILE
    pid = spawn_detached(script, log, rc_file, cwd=work_dir)
    undo.append(lambda: kill_group(pid))
    return Submission(
        scenario="local_docker",
        work_dir=str(work_dir),
        submitted_at=_now(),
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
