"""The Slurm backend: a job for this machine's Slurm or for one reached over ssh (the host
object says which, process/host.py), submitted as a batch of one by the one submit path
(slurm_submit.submit_slurm) and followed with its prerequisites by one squeue and at most one
sacct per poll; or, in persistent mode, run inside a held allocation (process/persistent.py)
and followed as a local process."""

from __future__ import annotations

from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process import host as hosts
from trtllm_script_builder.process.chain import ChainJob, PrerequisiteJob
from trtllm_script_builder.process.follow import EachPoller, Followed, Prerequisite
from trtllm_script_builder.process.handles import LocalProcess, LogNames, SlurmJob, SlurmPoller
from trtllm_script_builder.process.slurm_submit import (
    REMOTE,
    Member,
    load_jobs,
    resolve_ssh_host,
    submit_slurm,
)
from trtllm_script_builder.process.submission import Say, Submission, recorded

__all__ = ["SCENARIOS", "followed", "refuse_options", "resolve_ssh_host", "submit"]

SCENARIOS = ("local_slurm", "remote_slurm")


def refuse_ssh_host_off_remote(spec: JobSpec, ssh_host: str | None) -> None:
    """--ssh-host on a job that runs here would be ignored without a word: the user meant
    another job, or a remote build of this one."""
    if ssh_host and spec.execution_scenario != REMOTE:
        raise BuildError(
            "ssh_host",
            f"the job is {spec.execution_scenario}, which runs on this machine's cluster or Docker",
            "drop --ssh-host (it is for remote_slurm jobs)",
        )


def refuse_options(spec: JobSpec, *, ssh_host: str | None, persistent: bool = False) -> None:
    """Options this job cannot honour, refused rather than ignored."""
    refuse_ssh_host_off_remote(spec, ssh_host)
    if persistent and spec.execution_scenario == REMOTE:
        raise BuildError(
            "persistent",
            f"persistent mode is for local_slurm, not {spec.execution_scenario}",
            "drop --persistent",
        )
    if persistent and spec.prerequisites:
        raise BuildError(
            "persistent",
            "this job waits for a compile or image import job, which a held allocation cannot run first",
            "drop --persistent",
        )


def submit(
    spec: JobSpec,
    work_dir: Path,
    *,
    ssh_host: str | None = None,
    persistent: bool = False,
    alloc_time: str | None = None,
    say: Say = lambda _: None,
) -> Submission:
    if persistent:
        from trtllm_script_builder.process.persistent import submit_persistent

        return recorded(work_dir, lambda _: submit_persistent(spec, work_dir, alloc_time, say))
    jobs = load_jobs([Member(work_dir, "")], force=True)
    # a batch of one (decision batch-job-arrays)
    return submit_slurm(jobs, ssh_host=ssh_host, say=say)[0][0]


def followed(spec: JobSpec, sub: Submission, ssh_host: str | None) -> Followed:
    """What the run loop follows for a submitted job: the job with its prerequisites, or the
    process inside a held allocation."""
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
