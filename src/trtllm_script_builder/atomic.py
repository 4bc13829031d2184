"""Single files replaced whole, the folder lock, leftovers swept, signals (decision atomic-job-set).

The lowest layer, so every layer that keeps a file writes it the same way; a job folder's
set of files is `output.sets`' job, on top of these. A temporary name carries this tool's
tag, the host, the pid and a random token (`.<name>.tsb-<host>-<pid>-<token>.tmp`), and is
made exclusively: nobody can plant one under a name this process will use. `sweep` removes
those of a process of this host that is gone and that this user owns, so what a SIGKILL left
goes with the next run there, and another user's, in a shared folder such as /tmp, is never
touched (decision temporaries-are-owned).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")
_HOST = re.sub(r"[^A-Za-z0-9_.-]", "_", os.uname().nodename) or "host"
# `.<name>.tsb-<host>-<pid>-<token>.tmp`; a pid has at most 9 digits (Linux's pid_max is at
# most 2**22), so a name anyone may plant in /tmp never reaches kill(2) as a number it cannot
# take (an OverflowError ended every build there).
_TEMP = re.compile(
    r"\.(?P<name>.*)\.tsb-(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>[1-9][0-9]{0,8})-[0-9a-f]{12}\.tmp"
)


def temp_name(name: str) -> str:
    """A new hidden name for a file or folder `name` written by this process (a new random
    token each call)."""
    return f".{name}.tsb-{_HOST}-{os.getpid()}-{secrets.token_hex(6)}.tmp"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def remove(path: str) -> None:
    """A file, link or folder tree gone (a link is removed, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def sweep(folder: Path | str) -> list[str]:
    """Remove the temporaries a dead process of this host left in `folder`; their names.

    Only this user's own (the entry's owner, never followed): another user's, a live
    process's, or another host's (a folder on a shared file system) is left alone, and one
    that cannot be removed is no failure of the caller's.
    """
    handled: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return handled
    for e in entries:
        m = _TEMP.fullmatch(e.name)
        if m is None or m["host"] != _HOST or _alive(int(m["pid"])):
            continue
        try:
            if e.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            remove(e.path)
        except OSError:
            continue
        handled.append(e.name)
    return handled


_SWEPT: set[str] = set()


def sweep_once(folder: Path | str) -> None:
    """`sweep`, at most once per folder and process (build-many writes thousands of folders
    under one: its root is read once)."""
    key = os.path.abspath(folder)
    if key not in _SWEPT:
        _SWEPT.add(key)
        sweep(key)


class FolderBusy(OSError):
    """`folder_lock(..., wait=False)` found the folder locked by another process."""


_HELD: dict[tuple[int, int], int] = {}


@contextlib.contextmanager
def folder_lock(folder: str, wait: bool = True) -> Iterator[None]:
    """This process's exclusive lock on `folder` (flock on the folder itself,
    decision one-commit-per-folder).

    Every change of a job folder's set holds it, so two runs writing one folder land their
    sets one after the other; build-many holds its folder's for the whole run (`wait=False`:
    `FolderBusy` when another process holds it). Taken again by the process that holds it, it
    is held already. A file system without flock (some network ones), or a folder that cannot
    be opened for reading, gives no lock.
    """
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # a folder one may write to but not list: no lock
        yield
        return
    try:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key not in _HELD:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise FolderBusy(errno.EWOULDBLOCK, f"{folder} is locked", folder) from None
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                    raise
        _HELD[key] = _HELD.get(key, 0) + 1
        try:
            yield
        finally:
            _HELD[key] -= 1
            if not _HELD[key]:
                del _HELD[key]
    finally:
        os.close(fd)  # the lock goes with the last descriptor


# ---------------------------------------------------------------- signals


class Interrupted(BaseException):
    """SIGTERM or SIGHUP, raised where the program was, so cleanups run; not a
    KeyboardInterrupt, which Ctrl-C's own answers (watch's "the job keeps running") catch."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_to_exceptions() -> Iterator[None]:
    """For the block (a whole command, entered by the CLI alone): SIGTERM and SIGHUP raise
    `Interrupted`, once, so a second one does not break the cleanups of the first; SIGINT
    stays Python's KeyboardInterrupt (a second Ctrl-C at a prompt still aborts it). An
    ignored signal stays ignored; after the block the old handlers come back, and a signal
    whose old handler was the default is sent again, so the process ends as the sender
    meant. Outside the main thread: nothing."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        if caught:
            return
        caught.append(signum)
        raise Interrupted(signum)

    old: dict[int, Any] = {}
    for caught_sig in (signal.SIGTERM, signal.SIGHUP):
        prev = signal.getsignal(caught_sig)
        if prev is not signal.SIG_IGN and prev is not None:
            old[caught_sig] = signal.signal(caught_sig, handler)
    try:
        yield
    finally:
        for sig, before in old.items():
            signal.signal(sig, before)
        if caught and old.get(caught[0]) is signal.SIG_DFL:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.raise_signal(caught[0])


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait (blocked) until the block is done, then arrive."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def cleanly(cleanup: Callable[[], T]) -> T:
    """Run a cleanup to its end, and return what it returns: a signal that comes meanwhile
    arrives after it."""
    with signals_held():
        return cleanup()


# ---------------------------------------------------------------- single files


def read_regular(path: str, offset: int = 0, limit: int = 8 * 1024 * 1024) -> bytes | None:
    """Up to `limit` bytes of the regular file `path` from `offset`; None when it is missing, a
    link (a work_dir may be shared: a log linked to someone's ~/.netrc must not be read into a
    verdict or a report) or not a regular file (a named pipe would block the reader for ever);
    decision shared-work-dir."""
    got = read_regular_stat(path, offset, limit)
    return got[0] if got else None


def read_regular_stat(
    path: str, offset: int = 0, limit: int = 8 * 1024 * 1024
) -> tuple[bytes, os.stat_result] | None:
    """`read_regular`, with the status of the file read (its owner and mode)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        fh.seek(offset)
        return fh.read(limit), st


def open_regular(path: str | Path) -> IO[bytes]:
    """`path` opened for reading, through its links, when it is a regular file: a named pipe
    would block the reader for ever and /dev/zero never ends. OSError when it cannot be opened,
    ValueError when it is not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise ValueError("not a regular file")
    return fh


def foreign_links(path: str | Path) -> list[tuple[int, str]]:
    """(uid, path) of each part of the absolute `path` (its own parts, not where they lead)
    that is a link neither this user nor root made, outermost first: another user may point
    it anywhere, at any moment (decisions work-dir-links-are-own and
    slurm-logs-folder-is-private)."""
    me, found, part = os.geteuid(), [], "/"
    for name in Path(os.path.abspath(path)).parts[1:]:
        part = os.path.join(part, name)
        try:
            st = os.lstat(part)
        except OSError:
            break  # missing from here on
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (me, 0):
            found.append((st.st_uid, part))
    return found


def write_file(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """One file replaced whole, its folder made when missing."""
    with open_atomically(path, mode, binary=isinstance(data, bytes)) as fh:
        fh.write(data)


@contextlib.contextmanager
def open_atomically(path: Path, mode: int = 0o644, binary: bool = False) -> Iterator[IO[Any]]:
    """A file written under a temporary name beside `path`, renamed over it on success.

    Any failure, or a signal (`signals_to_exceptions`), removes the temporary and the folders
    made for it (decision temporaries-under-signals); one a SIGKILL left is removed by the next
    `open_atomically` in that folder (`sweep_once`).
    """
    made: list[str] = []
    tmp = f"{path.parent}/{temp_name(path.name)}"
    try:
        make_folders(str(path.parent), made)
        sweep_once(path.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:

        def discard() -> None:
            remove(tmp)
            remove_made(made)

        cleanly(discard)
        raise


def make_folders(folder: str, made: list[str]) -> None:
    """`mkdir -p folder`, noting in `made` each folder this call made (outermost first). The
    folders are never writable by group or others, whatever the umask: a job's Slurm logs go
    below them (decision slurm-logs-folder-is-private)."""
    missing: list[str] = []
    d = os.path.abspath(folder)
    while not os.path.lexists(d):
        missing.append(d)
        d = os.path.dirname(d)
    for m in reversed(missing):
        try:
            os.mkdir(m, 0o755)
        except FileExistsError:  # made by another run meanwhile: not ours to remove
            continue
        made.append(m)
    if not os.path.isdir(folder):
        os.mkdir(folder, 0o755)  # what is in the way (a file, a dangling link) says so


def remove_made(made: list[str]) -> None:
    """Remove the folders `make_folders` made, innermost first, those still empty."""
    for m in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(m)
