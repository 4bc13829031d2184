"""Reading WORK_DIR/job_spec.json back: the one reader check, submit, watch and run share; and
the checks submit makes of what it hands to Slurm, in a work_dir that may be a team's
(decisions submitted-files-are-own and slurm-logs-folder-is-private)."""

from __future__ import annotations

import errno
import os
import posixpath
import shlex
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from trtllm_script_builder.atomic import foreign_links
from trtllm_script_builder.errors import BuildError, refusal
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import DataError, parse_json
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.host import Host

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


@dataclass
class _Folder:
    """A log folder as found where the job runs: `at`, the nearest folder of it that exists
    (itself when it does), its physical path, and (uid, mode) of that one and of every folder
    above it up to `/`, in that order; `foreign`, how many entries of the log folder are
    another user's; `link`, a link on the way to it that another user made (uid, path);
    `unseen` says why none of it could be read."""

    folder: str
    at: str = ""
    physical: str = ""
    chain: tuple[tuple[int, int], ...] = ()
    foreign: int = 0
    link: tuple[int, str] | None = None
    unseen: str = ""


def check_log_folders(runner: Host, folders: Iterable[str]) -> None:
    """Before anything goes to sbatch: slurmstepd opens a job's `--output`/`--error` itself,
    as the submitting user (root, often), following a link at the log's name, before the
    script runs. So each folder the logs go to must be the user's (or root's) and not writable
    by group or others, and each folder above it writable by none but its owner and root, or
    sticky; else one line per folder and nothing is submitted (decision
    slurm-logs-folder-is-private). Checked where the jobs run: here, or over ssh in one
    command for all the folders."""
    wanted = list(dict.fromkeys(posixpath.normpath(f) for f in folders))
    if not wanted:
        return
    me, found = _seen_remote(runner, wanted) if runner.remote else _seen_here(wanted)
    where = f" on {runner.name}" if runner.remote else ""
    problems = [p for f in found for p in _log_folder_problems(f, me, where)]
    if problems:
        raise refusal(problems)


def _seen_here(folders: list[str]) -> tuple[int, list[_Folder]]:
    found = []
    for folder in folders:
        at = folder
        while not os.path.exists(at) and at != "/":
            at = os.path.dirname(at)
        physical = os.path.realpath(at)
        chain = []
        path = physical
        try:
            while True:
                st = os.stat(path)
                chain.append((st.st_uid, st.st_mode))
                if path == "/":
                    break
                path = os.path.dirname(path)
        except OSError as exc:
            found.append(_Folder(folder, unseen=f"{path} cannot be read ({exc.strerror})"))
            continue
        if not stat.S_ISDIR(chain[0][1]):
            found.append(_Folder(folder, unseen=f"{at} is not a folder"))
            continue
        foreign = _foreign_entries(physical) if at == folder else 0
        links = foreign_links(folder)  # the deepest is named
        theirs = links[-1] if links else None
        found.append(_Folder(folder, at, physical, tuple(chain), foreign, theirs))
    return os.geteuid(), found


def _foreign_entries(folder: str) -> int:
    me = os.geteuid()
    try:
        with os.scandir(folder) as entries:
            return sum(1 for e in entries if e.stat(follow_symlinks=False).st_uid not in (me, 0))
    except OSError:
        return 0  # gone or unreadable: the checks of its owner and mode still hold


# Per folder: the nearest part that exists, its physical path, how many entries in it are
# another user's (when it is the folder itself), the first link on the folder's path another
# user made (`uid path`), then `uid rawmode` (hex) of the nearest part and of each folder above
# it; `?` when it is not a folder that can be entered.
_SEE = r"""
u=$(id -u) || exit 9
echo "$u"
for f in {folders}; do
  d=$f
  while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname -- "$d"); done
  p=$(cd -P -- "$d" 2>/dev/null && pwd -P) || {{ printf '?\t%s\n' "$d"; continue; }}
  n=0
  if [ "$d" = "$f" ]; then
    n=$(find "$p" -mindepth 1 -maxdepth 1 ! -uid "$u" ! -uid 0 -printf x 2>/dev/null | wc -c)
  fi
  k=; q=$f
  while [ "$q" != / ]; do
    if [ -z "$k" ] && [ -h "$q" ] && o=$(stat -c %u -- "$q") && [ "$o" != "$u" ] &&
      [ "$o" != 0 ]; then k="$o $q"; fi
    q=$(dirname -- "$q")
  done
  printf '=\t%s\t%s\t%s\t%s\n' "$d" "$p" "$n" "$k"
  while :; do
    stat -c '%u %f' -- "$p" || exit 9
    [ "$p" = / ] && break
    p=$(dirname -- "$p")
  done
done
"""


def _seen_remote(runner: Host, folders: list[str]) -> tuple[int, list[_Folder]]:
    res = runner.shell(_SEE.format(folders=" ".join(shlex.quote(f) for f in folders)))
    lines = res.out.splitlines()
    if res.rc != 0 or not lines or not lines[0].isdigit():
        said = (res.err.strip().splitlines() or ["no answer"])[-1]
        raise BuildError(
            "remote_work_dir",
            f"the folders the jobs' logs go to could not be checked on {runner.name} ({said})",
            "check that the host has a POSIX sh, GNU stat and the folders can be read, "
            "then submit again",
        )
    found: list[_Folder] = []
    rows = iter(lines[1:])
    for folder in folders:
        head = next(rows, "").split("\t")
        if head[0] == "?" and len(head) == 2:
            found.append(_Folder(folder, unseen=f"{head[1]} is not a folder that can be entered"))
            continue
        if head[0] != "=" or len(head) != 5 or not head[3].strip().isdigit():
            raise BuildError(
                "remote_work_dir",
                f"{runner.name} answered the check of {folder} with {values.shown(head[0])}",
                "submit again",
            )
        _, at, physical, foreign, by = head
        owner, _, link = by.partition(" ")
        chain = []
        for _ in range(physical.count("/") if physical != "/" else 0):
            chain.append(_uid_mode(next(rows, "")))
        chain.append(_uid_mode(next(rows, "")))
        theirs = (int(owner), link) if owner.isdigit() and link else None
        found.append(_Folder(folder, at, physical, tuple(chain), int(foreign), theirs))
    return int(lines[0]), found


def _uid_mode(row: str) -> tuple[int, int]:
    uid, _, mode = row.partition(" ")
    try:
        return int(uid), int(mode, 16)
    except ValueError:
        return -1, 0o777  # unreadable: taken as open to all, so it is refused


def _log_folder_problems(found: _Folder, me: int, where: str) -> list[BuildError]:
    """One line per folder that lets another user put a link at a log's name."""
    field = "remote_work_dir" if where else "work_dir"
    why = (
        "Slurm opens the job's logs there itself, following a link another user plants at a "
        "log's name, so the job's output would replace the file it names"
    )
    if found.unseen:
        place = f"{found.folder}{where}"
        return [
            BuildError(
                field,
                f"{place}: {found.unseen}, so the folder the job's logs go to cannot be checked",
                "check the folder",
            )
        ]
    out = []
    if found.link is not None:
        uid, link = found.link
        place = f"{link}{where}"
        out.append(
            BuildError(
                field,
                f"{place} is a link uid {uid} made on the way to the log folder "
                f"{found.folder}: they can point it elsewhere between this check and the job",
                "give the real folder's path (or a work_dir in a folder only you can write)",
            )
        )
    exists = found.at == found.folder
    paths = [found.physical]
    while paths[-1] != "/":
        paths.append(posixpath.dirname(paths[-1]))
    for i, (path, (uid, mode)) in enumerate(zip(paths, found.chain, strict=True)):
        named = path if path == found.folder else f"{path} (holding the log folder {found.folder})"
        place = f"{named}{where}"
        if i == 0 and exists:
            if uid not in (me, 0):
                out.append(
                    BuildError(
                        field,
                        f"{place} is owned by uid {uid}, not by you (uid {me}): {why}",
                        "give a work_dir in a folder of yours that only you can write",
                    )
                )
            elif mode & 0o022:
                out.append(
                    BuildError(
                        field,
                        f"{place} can be written by {_who(mode)}: {why}",
                        f"chmod go-w {shlex.quote(path)}, or give a work_dir in a folder only "
                        "you can write",
                    )
                )
        elif mode & 0o022 and not mode & stat.S_ISVTX:
            out.append(
                BuildError(
                    field,
                    f"{place} can be written by {_who(mode)} and is not sticky, so "
                    f"they can move the log folder away and put their own there: {why}",
                    f"chmod go-w {shlex.quote(path)}, or give a work_dir in a folder only you "
                    "can write",
                )
            )
    if exists and found.foreign:
        place = f"{found.folder}{where}"
        out.append(
            BuildError(
                field,
                f"{place} holds {found.foreign} file(s) or link(s) another user "
                f"made while they could write it: {why}",
                f"remove them (find {shlex.quote(found.physical)} -maxdepth 1 ! -user "
                '"$(id -u)" -ls shows them), then submit again',
            )
        )
    return out


def _who(mode: int) -> str:
    return " and ".join(w for w, bit in (("its group", 0o020), ("others", 0o002)) if mode & bit)


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
