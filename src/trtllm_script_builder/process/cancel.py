"""`cancel`: stop what `submit` started from a folder (a job with its own compile and import jobs,
or every job of a build-many folder), and say what was stopped and what had already ended.

Only what the folder's records name is touched: a Slurm job id through the host the job runs on
(one scancel for them all, only those still queued or running), a local process only while it is
still the process submit started (its start time), and never a prerequisite another job shares
(decision cancel-by-folder)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.host import Host


@dataclass
class Cancelled:
    stopped: list[str] = field(default_factory=list)  # "job 12 (RUNNING)"
    ended: list[str] = field(default_factory=list)  # "job 11 (COMPLETED)"
    left: list[str] = field(default_factory=list)  # shared prerequisites, not ours to stop

    def lines(self) -> list[str]:
        out = [f"cancelled {what}" for what in self.stopped]
        out += [f"already ended: {what}" for what in self.ended]
        out += [f"left running: {what}, shared with other jobs" for what in self.left]
        return out or ["nothing to cancel"]


def cancel(folder: Path, *, ssh_host: str | None = None) -> Cancelled:
    """Cancel what was submitted from `folder` (a job's work_dir or a build-many folder)."""
    from trtllm_script_builder.process.slurm_submit import is_batch, load_batch_submission
    from trtllm_script_builder.process.submission import load_submission, own_record

    folder = folder.resolve()
    if is_batch(folder):
        batch = load_batch_submission(folder)
        if batch is None:
            raise _not_submitted(folder, "batch_submission.json")
        own_record(batch, folder / "batch_submission.json")
        from trtllm_script_builder.process import host as hosts

        named = [(f"job {j.job_id} ({j.entry})", j.job_id) for j in batch.jobs]
        for data in batch.prerequisites or []:
            named.append((f"{data['kind']} job {data['job_id']}", data["job_id"]))
        return _scancel(hosts.host_for(ssh_host or batch.ssh_host), named, Cancelled())
    sub = load_submission(folder)
    if sub is None:
        raise _not_submitted(folder, "submission.json")
    own_record(sub, folder / "submission.json")
    from trtllm_script_builder.process.spec_file import read_job_spec
    from trtllm_script_builder.resolve.backend import backend_of

    spec = read_job_spec(folder)
    parts = backend_of(spec.execution_scenario).followed(spec, sub, ssh_host)
    done = Cancelled()
    if sub.job_id is None or sub.pid is not None:  # a process on this machine
        from trtllm_script_builder.process.handles import LocalProcess

        handle = parts.handle
        assert isinstance(handle, LocalProcess)
        if handle.refresh():
            done.ended.append(handle.what)
        else:
            handle.cancel()
            done.stopped.append(handle.what)
        return done
    named = [(f"job {sub.job_id}", sub.job_id)]
    for p in parts.prereqs:
        if p.shared:
            done.left.append(f"{p.kind} job {p.job_id}")
        else:
            named.append((f"{p.kind} job {p.job_id}", p.job_id))
    return _scancel(parts.host, named, done)


def _scancel(on: Host, named: list[tuple[str, str]], done: Cancelled) -> Cancelled:
    """One query for every job, one scancel for those still queued or running."""
    ids = list(dict.fromkeys(job_id for _, job_id in named))
    statuses = slurm.query_many(on, ids, slurm.accounting_on(on))
    live: list[str] = []
    for what, job_id in named:
        st = statuses.get(job_id) or slurm.JobStatus(job_id)
        if st.terminal:
            done.ended.append(f"{what} ({st.state})")
        elif job_id not in live:
            live.append(job_id)
            done.stopped.append(f"{what} ({st.state or 'unknown to Slurm'})")
    if live:
        res = on(["scancel", *live])
        if res.rc != 0:
            raise ToolFailed(
                "job_id",
                f"scancel {' '.join(live)} on {on.name} failed: {res.text or res.rc}",
                "check the cluster and cancel again",
            )
    return done


def _not_submitted(folder: Path, record: str) -> BuildError:
    return BuildError(
        "work_dir",
        f"{folder} has not been submitted (no {record})",
        "give the folder `trtllm-script-builder submit` was run on",
    )
