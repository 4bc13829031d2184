"""`submit`: start a built job with its backend and record it in WORK_DIR/submission.json; a
build-many folder goes through the same Slurm submit path (slurm_submit.submit_slurm).
The backend is the registry's (resolve/backend.py), which `backends/` fills."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process.spec_file import check_own_files, read_job_spec
from trtllm_script_builder.process.submission import Say, Submission, load_submission
from trtllm_script_builder.resolve.backend import backend_of

__all__ = ["one_submit", "submit"]

LOCK = ".submit.lock"


@contextlib.contextmanager
def one_submit(folder: Path) -> Iterator[None]:
    """One submit of a folder at a time: two at once made two Slurm jobs, and the record kept
    only one of them (decision one-submit-per-folder). The lock is the kernel's (flock), so a
    submit that dies leaves none behind. A job of a build-many folder (its parent holds
    jobs.json) takes the batch folder's lock too: `submit BATCH` and `submit BATCH/job` at once
    sent the job twice."""
    parent = folder.parent
    if folder.name and (parent / "jobs.json").is_file():
        with _locked(parent), _locked(folder):
            yield
    else:
        with _locked(folder):
            yield


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    try:
        # not through a link: the folder may be shared (decision shared-work-dir)
        # nor from a pipe, which would hold the open for ever
        flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(folder / LOCK, flags, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
    except FileNotFoundError:
        yield  # no folder: the submit refuses it with its own words
        return
    except OSError as exc:
        raise BuildError(
            "work_dir", f"{folder / LOCK} cannot be opened ({exc.strerror})", "remove it"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BuildError(
                "work_dir",
                f"{folder} is being submitted by another process",
                "wait for that submit, then watch the job it started",
            ) from None
        yield
    finally:
        os.close(fd)


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
    with one_submit(work_dir):
        return _submit(work_dir, force, ssh_host, persistent, alloc_time, say)


def _submit(
    work_dir: Path,
    force: bool,
    ssh_host: str | None,
    persistent: bool,
    alloc_time: str | None,
    say: Say,
) -> Submission:
    spec = read_job_spec(work_dir)
    previous = load_submission(work_dir)
    if previous is not None and not force:
        what = f"job {previous.job_id}" if previous.job_id else f"pid {previous.pid}"
        raise BuildError(
            "work_dir",
            f"{work_dir} was already submitted ({what}, {previous.submitted_at})",
            "watch it with `trtllm-script-builder watch`, or pass --force to submit it again",
        )
    check_own_files(work_dir, spec)
    backend = backend_of(spec.execution_scenario)
    backend.refuse_options(spec, ssh_host=ssh_host, persistent=persistent)
    sub: Submission = backend.submit(
        spec, work_dir, ssh_host=ssh_host, persistent=persistent, alloc_time=alloc_time, say=say
    )
    return sub
