"""Reading WORK_DIR/job_spec.json back: the one reader check, submit, watch and run share."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from pydantic import ValidationError

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import DataError, parse_json
from trtllm_script_builder.model.jobspec import JobSpec

JOB_SPEC = "job_spec.json"
MAX_SPEC = 64 * 1024 * 1024  # bytes of a job_spec.json


def read_job_spec(work_dir: Path) -> JobSpec:
    """The validated job_spec.json of work_dir; a BuildError on work_dir when it is missing,
    unreadable, not JSON, or not what this version writes."""
    path = Path(work_dir) / JOB_SPEC
    try:
        text = _read(path)
    except FileNotFoundError:
        raise BuildError(
            "work_dir",
            f"{work_dir} holds no job_spec.json",
            "build the job first (trtllm-script-builder build ...)",
        ) from None
    except OSError as exc:
        raise BuildError(
            "work_dir", f"{path} cannot be read ({exc.strerror})", "check its permissions"
        ) from None
    try:
        # the one JSON reader (decision one-data-reader): a repeated key or deep nesting is refused
        spec = JobSpec.model_validate(parse_json(text))
    except DataError as exc:
        key = "(whole file)"
        raise BuildError(
            "work_dir", f"{path}: {key}: {exc}", "rebuild the job with this version"
        ) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        # only the first problem: the fix (a rebuild) is the same for all of them
        key = ".".join(str(p) for p in err["loc"]) or "(whole file)"
        raise BuildError(
            "work_dir", f"{path}: {key}: {err['msg']}", "rebuild the job with this version"
        ) from None
    problem = _unsafe(spec)
    if problem is not None:
        key, what = problem
        raise BuildError("work_dir", f"{path}: {key}: {what}", "rebuild the job with this version")
    return spec


def check_own_files(work_dir: Path, spec: JobSpec) -> None:
    """Before submit starts anything: job_spec.json and every script it names are regular files
    of this user's that nobody else may write, as are the folders inside work_dir that hold them,
    and a link among them is the user's too (decision submitted-files-are-own). In a team's
    work_dir another member put a job_spec.json of theirs, naming a script of theirs, in place of
    the link, and the victim's submit (root's, often) sent their script to sbatch."""
    paths = [str(Path(work_dir) / JOB_SPEC), spec.script_path]
    paths += [e["script_path"] for e in spec.prerequisites or []]
    for path in paths:
        what = _not_own(path, os.path.realpath(work_dir))
        if what is not None:
            raise BuildError(
                "work_dir",
                f"{path} is {what}: submit starts only files of yours that nobody else may write",
                "build the job again (and check who else writes into this work_dir)",
            )


def _not_own(path: str, top: str) -> str | None:
    """What makes `path` (followed through its links) not a file of this user's alone."""
    me = os.geteuid()
    try:
        link = os.lstat(path)
        real = os.path.realpath(path)
        st = os.stat(real)
    except FileNotFoundError:
        return None  # a missing file is named by the submit's own words
    except OSError as exc:
        return f"not readable ({exc.strerror})"
    if stat.S_ISLNK(link.st_mode) and link.st_uid != me:
        return f"a link of uid {link.st_uid}'s"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != me:
        return f"owned by uid {st.st_uid}, not by you"
    if st.st_mode & 0o022:
        return "writable by others"
    folder = os.path.dirname(real)
    while folder.startswith(top + os.sep):  # the set folders between work_dir and the file
        fst = os.lstat(folder)
        if fst.st_uid != me or fst.st_mode & 0o022:
            return f"in {folder}, which is not a folder of yours that only you may write"
        folder = os.path.dirname(folder)
    return None


def _read(path: Path) -> str:
    """The file's text, through its link into the current set but never from a named pipe: a
    teammate's pipe there held submit, watch and cancel for ever (decision shared-work-dir)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = fh.read(MAX_SPEC + 1)
    if len(data) > MAX_SPEC:
        raise OSError(errno.EFBIG, f"more than {MAX_SPEC} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise OSError(errno.EILSEQ, "not UTF-8") from None


def _unsafe(spec: JobSpec) -> tuple[str, str] | None:
    """The first value that submit, watch or release would pass to a program and that no
    build writes (an edited file): checked as a request's values are
    (decision one-validation-layer)."""
    for key in ("script_path", "work_dir", "remote_work_dir", "remote_script_path"):
        value = getattr(spec, key)
        if value is not None and (values.text_problem(value) or not values.is_absolute_path(value)):
            return key, f"is not an absolute path (got {values.shown(value)})"
    checks = (("container_name", values.MODEL_NAME), ("ssh_host", values.HOST))
    for key, pattern in checks:
        value = getattr(spec, key)
        if value is not None and (values.text_problem(value) or not pattern.fullmatch(value)):
            return key, f"is not a {key.replace('_', ' ')} (got {values.shown(value)})"
    for key in ("log_file_pattern", "error_file_pattern", "junit_file_pattern", "log_file"):
        pattern = getattr(spec, key)
        bad = values.text_problem(pattern) if pattern is not None else None
        if bad is not None:
            return key, f"{bad} (got {values.shown(pattern)})"
    for i, entry in enumerate(spec.prerequisites or []):
        found = _prerequisite_problem(entry)
        if found is not None:
            return f"prerequisites[{i}].{found[0]}", found[1]
    return None


# What render/spec.py writes for each job of the chain; submit passes the script to sbatch as
# an argument of its own and reads the logs the patterns name (decision shown-never-obeyed).
PREREQUISITE_KINDS = ("compile", "import")


def _prerequisite_problem(entry: dict[str, str]) -> tuple[str, str] | None:
    for key in ("kind", "key", "script_path"):
        if key not in entry:
            return key, "is missing"
    if entry["kind"] not in PREREQUISITE_KINDS:
        return "kind", f"is not compile or import (got {values.shown(entry['kind'])})"
    for key, value in entry.items():
        problem = values.text_problem(value)
        if problem is not None:
            return key, f"{problem} (got {values.shown(value)})"
    for key in ("script_path", "remote_script_path"):
        path = entry.get(key)
        if path is not None and not values.is_absolute_path(path):
            return key, f"is not an absolute path (got {values.shown(path)})"
    return None
