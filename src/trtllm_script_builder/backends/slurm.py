"""The Slurm backend, here or over ssh (process/host.py): a job is a batch of one for the one
submit path (slurm_submit), followed with its prerequisites by one squeue and at most one sacct
per poll; or, in persistent mode, run and followed in a held allocation (process/persistent.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.resolve.backend import Backend, refuse_options, register_backend

if TYPE_CHECKING:
    from trtllm_script_builder.model.jobspec import JobSpec
    from trtllm_script_builder.process.check import Checked
    from trtllm_script_builder.process.follow import Followed
    from trtllm_script_builder.process.host import Host
    from trtllm_script_builder.process.submission import Submission

LOCAL, REMOTE = "local_slurm", "remote_slurm"


def _refuse(spec: JobSpec, *, ssh_host: str | None, persistent: bool = False) -> None:
    """Options this job cannot honour, refused rather than ignored."""
    refuse_options(spec, ssh_host=ssh_host, persistent=persistent)
    if persistent and spec.prerequisites:
        raise BuildError(
            "persistent",
            "this job waits for a compile or image import job, which a held allocation cannot run first",
            "drop --persistent",
        )


def _host(spec: JobSpec, override: str | None = None) -> Host:
    """Here, or the ssh host `override`, job_spec or its slurm_env names (decision remote-check)."""
    from trtllm_script_builder.process.host import host_for
    from trtllm_script_builder.process.slurm_submit import resolve_ssh_host

    _refuse(spec, ssh_host=override)
    remote = spec.execution_scenario in SLURM.over_ssh
    return host_for(resolve_ssh_host(spec, override) if remote else None)


def submit(
    spec: JobSpec, work_dir: Path, *, ssh_host: str | None, persistent: bool, **kw: Any
) -> Submission:
    from trtllm_script_builder.process.slurm_submit import Member, load_jobs, submit_slurm
    from trtllm_script_builder.process.submission import recorded

    if persistent:
        from trtllm_script_builder.process.persistent import submit_persistent

        return recorded(
            work_dir, lambda _: submit_persistent(spec, work_dir, kw["alloc_time"], kw["say"])
        )
    jobs = load_jobs([Member(work_dir, "")], force=True)
    # a batch of one (decision batch-job-arrays)
    return submit_slurm(jobs, ssh_host=ssh_host, say=kw["say"])[0][0]


def followed(spec: JobSpec, sub: Submission, ssh_host: str | None) -> Followed:
    """What the run loop follows for a submitted job: the job with its prerequisites, or the
    process inside a held allocation."""
    from trtllm_script_builder.process import host as hosts
    from trtllm_script_builder.process.chain import ChainJob, PrerequisiteJob
    from trtllm_script_builder.process.follow import EachPoller, Followed, Prerequisite
    from trtllm_script_builder.process.handles import LocalProcess, LogNames, SlurmJob, SlurmPoller

    if sub.pid is not None:
        return Followed(LocalProcess.of(sub), EachPoller(), hosts.host_for(None), [])
    assert sub.job_id is not None
    # a job submitted over ssh was recorded with its host, and is asked there again
    on = hosts.host_for(ssh_host or sub.ssh_host)
    name = on.name if on.remote else sub.host
    array_logs = None
    if sub.array_job_id is not None:
        base = spec.remote_work_dir or spec.work_dir or sub.work_dir
        array_logs = LogNames(spec.log_file_pattern, spec.error_file_pattern, base)
    handle = SlurmJob(
        sub.job_id, on, on.read_from, sub.log_file, sub.err_file, name, array_logs=array_logs
    )
    prereqs = []
    for data in sub.prerequisites or []:
        job = ChainJob.from_json(data)
        # a batch's prerequisites are the batch's: only `watch DIR` cancels them
        shared = job.shared or bool(sub.batch_dir)
        pre = PrerequisiteJob(job, on, on.read_from, name)
        prereqs.append(Prerequisite(job.kind, job.job_id, pre, shared=shared))
    return Followed(handle, SlurmPoller(on), on, prereqs)


def check(
    spec: JobSpec,
    work_dir: Path,
    *,
    ssh_host: str | None = None,
    host: Host | None = None,
    user: str | None = None,
) -> Checked:
    """`sbatch --test-only` and the cluster's own limits, on the host its tools run on."""
    from trtllm_script_builder.process.check import (
        EXIT_OK,
        EXIT_PROBLEMS,
        EXIT_UNREACHABLE,
        Checked,
    )
    from trtllm_script_builder.process.check.slurm import check_slurm

    if host is None:
        try:
            host = _host(spec, ssh_host)
        except BuildError as err:
            return Checked([f"{err.field}: {err.problem}; {err.fix}"], EXIT_PROBLEMS)
    res = check_slurm(spec, work_dir, host, user)
    rc = EXIT_UNREACHABLE if res.unreachable else EXIT_PROBLEMS if res.problems else EXIT_OK
    return Checked(res.problems, rc, res.cluster, host.ssh_host)


def _steps(spec: JobSpec) -> tuple[str, str]:
    if spec.execution_scenario not in SLURM.over_ssh:
        return "sbatch --test-only on this cluster", "sbatch"
    host = spec.ssh_host or (spec.slurm_env or {}).get("ssh_host") or "the cluster"
    return f"sbatch --test-only on {host}", f"copy to {host}:{spec.remote_work_dir}, sbatch there"


BOTH = (LOCAL, REMOTE)
_BOTH_READ = ("partition", "account", "slurm_env_file", "mpi_plugin")
_ONLY = {"persistent_mode": (LOCAL,), "remote_repo_path": (REMOTE,), "remote_work_dir": (REMOTE,)}
SLURM = register_backend(
    Backend(
        "slurm",
        BOTH,
        queued=True,
        over_ssh=(REMOTE,),
        persistent=(LOCAL,),
        # the fields only Slurm scenarios read (decision unread-field-warning)
        fields=tuple((f, BOTH) for f in _BOTH_READ) + tuple(_ONLY.items()),
        steps=_steps,
        refuse_options=_refuse,
        submit=submit,
        followed=followed,
        host=_host,
        check=check,
    )
)
