"""What `submit` started, kept in WORK_DIR/submission.json for `watch` and `release`."""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import parse_json
from trtllm_script_builder.model.jobspec import JobSpec

SUBMISSION = "submission.json"
RC_FILE = ".run.exit_code"
MAX_RECORD = 64 * 1024 * 1024  # bytes of a submission record (a batch of thousands of jobs)

Say = Callable[[str], None]
Undo = list[Callable[[], object]]  # what a submit started, undone when it fails or is stopped
# A git object name (SHA-1 or SHA-256), as `git rev-parse HEAD` prints it.
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
SOURCE_VAR = "TSB_SOURCE_COMMIT"


def source_args(commit: str | None) -> list[str]:
    """sbatch options that give a job the commit submit synced its clone to
    (decision source-commit-check); the compile and test scripts of a chain check the clone against
    it when they start."""
    return [f"--export=ALL,{SOURCE_VAR}={commit}"] if commit else []


def log_path(pattern: str | None, job_id: str, base: str) -> str | None:
    """The log of a job: job_spec's pattern is relative to the job's folder
    (decision relative-log-patterns); an absolute one (job_specs written before) stands as it is."""
    return posixpath.join(base, pattern.replace("%j", job_id)) if pattern else None


def err_path(out: str | None) -> str | None:
    """Without error_file_pattern (older job_specs): `<name>_%j.out` and `.err` side by side."""
    if out and out.endswith(".out"):
        return out[: -len(".out")] + ".err"
    return None


class Record(BaseModel):
    """A record `submit` wrote, read back from a folder that may be a team's: whoever else may
    write the file may name any pid, start time (readable by all in /proc) or job id in it, so
    such a record is followed but never acted on (decision records-acted-on-are-own)."""

    _foreign: str | None = PrivateAttr(default=None)

    @property
    def foreign(self) -> str | None:
        """Why the file may hold another user's words (None: this user's alone)."""
        return self._foreign


def own_record(record: Record, path: Path) -> None:
    """Refuse to cancel what a record another user could have written names (decision
    records-acted-on-are-own)."""
    if record.foreign:
        raise BuildError(
            "work_dir",
            f"{path} is not yours alone ({record.foreign}): the jobs and processes it names "
            "are not cancelled",
            "act on them by hand after checking them, or ask whoever submitted them",
        )


class Submission(Record):
    """What `submit` started: a Slurm job (job_id) or a local process (pid). The file is
    ours, but may be edited: a job id goes to scancel, a container name to docker kill, so
    they are checked as a request's values are (decision one-validation-layer)."""

    model_config = ConfigDict(extra="ignore")

    scenario: str
    work_dir: str
    submitted_at: str
    host: str
    script: str
    job_id: str | None = None
    pid: int | None = None
    pid_start: str | None = None
    rc_file: str | None = None
    log_file: str | None = None
    err_file: str | None = None
    ssh_host: str | None = None
    remote_work_dir: str | None = None
    persistent: bool = False
    alloc_job_id: str | None = None
    alloc_state_file: str | None = None
    container_name: str | None = None
    # The chain's jobs submitted first (process/chain.py ChainJob.to_json), in order.
    prerequisites: list[dict[str, Any]] | None = None
    # A job submitted as task `array_task_id` of the Slurm job array `array_job_id` (submit of
    # a build-many folder): job_id is then `ARRAY_TASK`, and the log names, which hold the
    # task's own job id, are known only once it starts (log_file stays unset).
    array_job_id: str | None = None
    array_task_id: int | None = None
    batch_dir: str | None = None
    # a remote job with a compile: the commit submit synced remote_repo_path to, which the
    # jobs check the clone against when they start (decision source-commit-check).
    source_commit: str | None = None

    @model_validator(mode="after")
    def _values(self) -> Submission:
        problem = record_problem(self.model_dump())
        if problem is not None:
            raise ValueError(problem)
        for key, pattern in (
            ("container_name", values.MODEL_NAME),
            ("ssh_host", values.HOST),
        ):
            value = getattr(self, key)
            if value is not None and not pattern.fullmatch(value):
                raise ValueError(f"{key} {values.shown(value)} is not what submit writes")
        # a pid is signalled as a process group: 0 and -1 name groups of their own, 1 is init
        if self.pid is not None and self.pid < 2:
            raise ValueError(f"pid {self.pid} is not what submit writes")
        if self.pid_start is not None and values.whole_number(self.pid_start) is None:
            raise ValueError(f"pid_start {values.shown(self.pid_start)} is not what submit writes")
        if self.source_commit is not None and not COMMIT.fullmatch(self.source_commit):
            raise ValueError(
                f"source_commit {values.shown(self.source_commit)} is not what submit writes"
            )
        return self


# The kinds of job a chain submits before the test job (process/chain.py).
CHAIN_KINDS = ("compile", "import")


def record_problem(data: dict[str, Any]) -> str | None:
    """What makes a record `submit` wrote (submission.json, batch_submission.json) one it did
    not write, or None: a string no line can carry, a job id (any `*job_id` key, and the
    ids a batch job waits for) that is not a Slurm job id (it goes to scancel and sacct as an
    argument of its own: `--user=me` would cancel every job of the user), a prerequisite
    without its kind, key and job id (decisions one-validation-layer and shown-never-obeyed)."""
    found = values.tree_problem(data)
    if found is not None:
        return f"{found[0]} {found[1]}"
    return _ids_problem(data, "")


def _ids_problem(data: Any, where: str) -> str | None:
    if isinstance(data, list):
        for i, item in enumerate(data):
            problem = _ids_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if not isinstance(data, dict):
        return None
    for key, value in data.items():
        name = f"{where}.{key}" if where else key
        if key.endswith("job_id") and value is not None:
            if not isinstance(value, str) or not values.JOB_ID.fullmatch(value):
                return f"{name} {values.shown(value)} is not what submit writes"
        elif key == "prerequisites" and isinstance(value, list):
            for i, item in enumerate(value):
                item_name = f"{name}[{i}]"
                if isinstance(item, str) and not values.JOB_ID.fullmatch(item):
                    return f"{item_name} {values.shown(item)} is not what submit writes"
                if isinstance(item, dict) and (
                    item.get("kind") not in CHAIN_KINDS
                    or not isinstance(item.get("key"), str)
                    or not isinstance(item.get("job_id"), str)
                ):
                    return f"{item_name} is not a prerequisite submit writes"
        problem = _ids_problem(value, name)
        if problem:
            return problem
    return None


def load_submission(work_dir: Path) -> Submission | None:
    return read_record(work_dir / SUBMISSION, Submission)


_Record = TypeVar("_Record", bound=Record)


def read_record(path: Path, model: type[_Record]) -> _Record | None:
    """A record `submit` wrote (submission.json, a batch's record), None when there is none;
    one error line when it cannot be read as `model`."""
    from trtllm_script_builder.atomic import read_regular_stat

    if not path.exists() and not path.is_symlink():
        return None
    # not through a link nor from a pipe: a work_dir may be shared (decision shared-work-dir)
    got = read_regular_stat(str(path), 0, MAX_RECORD + 1)
    data = got[0] if got else None
    if data is None or len(data) > MAX_RECORD:
        what = "a regular file" if data is None else f"at most {MAX_RECORD} bytes"
        raise BuildError("work_dir", f"{path} is not {what}", "submit again")
    try:
        # the one JSON reader (decision one-data-reader): a repeated key, deep nesting refused
        record = model.model_validate(parse_json(data.decode()))
    except (ValueError, ValidationError) as exc:  # ValueError: not UTF-8
        reason = str(exc).splitlines()[0]
        if isinstance(exc, ValidationError):
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            reason = f"{loc}: {err['msg']}" if loc else err["msg"]
        raise BuildError("work_dir", f"{path} cannot be read ({reason})", "submit again") from None
    assert got is not None
    st = got[1]
    if st.st_uid != os.geteuid():
        record._foreign = f"written by uid {st.st_uid}, not by you"
    elif st.st_mode & 0o022:
        record._foreign = f"mode {st.st_mode & 0o777:o}: others may write it"
    return record


def write_json(path: Path, data: dict[str, object], mode: int = 0o644) -> None:
    from trtllm_script_builder.atomic import write_file

    write_file(path, json.dumps(data, indent=2) + "\n", mode)


def save_submission(work_dir: Path, sub: Submission) -> None:
    write_json(work_dir / SUBMISSION, sub.model_dump(exclude_none=True))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def script_of(spec: JobSpec) -> Path:
    script = Path(spec.script_path)
    if not script.is_file():
        raise BuildError(
            "script_path", f"{script} does not exist", "build the job again into this work_dir"
        )
    return script


def recorded(work_dir: Path, start: Callable[[Undo], Submission]) -> Submission:
    """Run `start` and record what it started in work_dir/submission.json; when it fails or
    is interrupted before the record is written, what it noted in its undo list is undone:
    a job nobody has a record of would run unwatched (decision interrupted-submit-undone)."""
    from trtllm_script_builder.atomic import cleanly, signals_held

    undo: Undo = []
    try:
        sub = start(undo)
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
