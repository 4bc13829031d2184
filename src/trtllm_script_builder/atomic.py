"""Files and sets of files replaced whole, under any signal (decision 63).

The lowest layer, so every layer that keeps a file (output, the template cache, the runner's
records) writes it the same way; a build's folder of files is `output.writer`'s job, on top of
`commit_set` here.

* A temporary name always carries this tool's tag, the host and the pid
  (`.<name>.tsb-<host>-<pid>.tmp`). `sweep` removes those of a process of this host that is no
  longer running, so what a SIGKILL (which nothing can catch) leaves behind goes with the next
  run that writes into the same folder.
* `signals_as_exceptions` turns SIGINT, SIGTERM and SIGHUP into an exception, so every
  `finally` and `except` that removes a temporary runs; the previous handlers come back after,
  and a signal whose default was to end the process ends it then, as it would have.
* `commit_set` moves a staged folder's entries into place with those signals held back, and
  first renames the staged folder to a `.commit` name: a run that finds one of a dead process
  finishes the moves (the set is whole on disk, it only was not all moved yet).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_HOST = re.sub(r"[^A-Za-z0-9_.-]", "_", os.uname().nodename) or "host"
# `.<name>.tsb-<host>-<pid>.tmp` (or `.commit`): the pid is the digits before the suffix.
_TEMP = re.compile(
    r"\.(?P<name>.*)\.tsb-(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>[0-9]+)\.(?P<kind>tmp|commit)"
)
SET_NAME = "tsb-set"  # the staged set inside an existing folder: `.tsb-set.tsb-<host>-<pid>.tmp`


def temp_name(name: str, kind: str = "tmp") -> str:
    """The hidden name a file or folder `name` is written under by this process."""
    return f".{name}.tsb-{_HOST}-{os.getpid()}.{kind}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return True
    return True


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if _real_dir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def sweep(folder: Path | str) -> list[str]:
    """Remove what a dead process of this host left in `folder`; finish its half-moved sets.

    Returns the names it handled. A temporary of a live process, or of another host (a folder
    on a shared file system), is left alone.
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
        if m["kind"] == "commit" and e.is_dir(follow_symlinks=False):
            # The set was whole: finish moving it, as its own run would have (decision 76).
            with contextlib.suppress(OSError), folder_lock(str(folder)):
                if os.path.isdir(e.path):  # not finished by another sweep meanwhile
                    _move_entries(e.path, str(folder), None, [])
        _remove(e.path)
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


def _move_entries(
    src: str, dst: str, backup: str | None, done: list[tuple[str, str | None]], pause: bool = False
) -> None:
    """Every entry of src replaces its namesake in dst; job_spec.json last (it names the rest).

    A folder of the set is merged into the folder of its name; a folder is never replaced by
    a file or a file by a folder (`clash` refuses that before anything is moved). With a
    `backup` folder, the entry each move replaces is kept there first (a hard link, so the
    name is replaced in one step; a rename when the file cannot be linked) and every move is
    noted in `done`, so `_undo` can put the old set back.
    """
    entries = sorted(os.scandir(src), key=lambda e: (e.name == "job_spec.json", e.name))
    for i, e in enumerate(entries):
        if pause and i == 1:
            checkpoint("commit")
        d = os.path.join(dst, e.name)
        if e.is_dir(follow_symlinks=False) and _real_dir(d):
            _move_entries(e.path, d, backup and os.path.join(backup, e.name), done)
            os.rmdir(e.path)
            continue
        if backup is None or not os.path.lexists(d):
            os.replace(e.path, d)
            done.append((d, None))
            continue
        if not os.path.isdir(backup):
            os.makedirs(backup)
        old = os.path.join(backup, e.name)
        try:
            os.link(d, old, follow_symlinks=False)
        except OSError:
            # Not linkable (another user's file, a file system without hard links): moved
            # aside instead. What cannot be moved (immutable, a mount point) fails here,
            # before its name changed.
            os.rename(d, old)
        done.append((d, old))
        os.replace(e.path, d)


def _undo(done: list[tuple[str, str | None]]) -> None:
    """Put back what `_move_entries` replaced, last move first (the new entries go)."""
    for d, old in reversed(done):
        with contextlib.suppress(OSError):
            if old is None:
                _remove(d)
            else:
                os.replace(old, d)


def clash(src: str, dst: str) -> str | None:
    """A path in dst that moving src's entries over it would turn from a folder into something
    else or back, or None."""
    for e in os.scandir(src):
        d = os.path.join(dst, e.name)
        if not os.path.lexists(d):
            continue
        if e.is_dir(follow_symlinks=False) != _real_dir(d):
            return d
        if _real_dir(d):
            found = clash(e.path, d)
            if found:
                return found
    return None


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


_HELD: dict[tuple[int, int], int] = {}


class FolderBusy(OSError):
    """`folder_lock(..., wait=False)` found the folder locked by another process."""


@contextlib.contextmanager
def folder_lock(folder: str, wait: bool = True) -> Iterator[None]:
    """This process's exclusive lock on `folder` (flock on the folder itself, decision 77).

    Every commit of a set into an existing folder holds it, so two runs writing one folder
    move their sets one after the other, never interleaved; build-many holds its folder's for
    the whole run (`wait=False`: `FolderBusy` when another process holds it). Taken again by
    the process that holds it, it is held already. A file system without flock (some network
    ones), or a folder that cannot be opened for reading, gives no lock, as before.
    """
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # a folder one may write to but not list: no lock, as before
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


def commit_set(stage: str, folder: str, stale: Callable[[str], set[str]] | None = None) -> None:
    """Move the whole set staged in `stage` (a folder inside `folder`) into `folder`, or put
    the old set back and raise.

    The stage is first renamed to its `.commit` name, the point from which the set counts as
    written: a SIGKILL after it leaves a folder the next `sweep` finishes moving, one before it
    a temporary the next `sweep` removes. SIGINT, SIGTERM and SIGHUP wait until the moves are
    done, so they never split the set. A move that fails (an old file that cannot be
    replaced: immutable, a mount point) undoes the moves before it: the folder is left as it
    was (decision 76). The folder is locked meanwhile (`folder_lock`). `stale`, called with
    the folder under the lock before the moves, names files of the set being replaced that the
    new set does not have: those that are plain files are removed once it is in place.
    """
    name = os.path.basename(stage)
    m = _TEMP.fullmatch(name)
    assert m is not None and m["kind"] == "tmp", name
    committing = os.path.join(folder, name[: -len(".tmp")] + ".commit")
    backup = os.path.join(folder, temp_name("tsb-old"))
    with folder_lock(folder):
        found = clash(stage, folder)
        if found:  # refused before anything moves: the folder is left as it was
            raise FileExistsError(errno.EEXIST, f"{found} is in the way of a file or folder", found)
        drop = (stale(folder) if stale else set()) - set(os.listdir(stage))
        with signals_held():
            os.rename(stage, committing)
            done: list[tuple[str, str | None]] = []
            try:
                _move_entries(committing, folder, backup, done, pause=True)
            except BaseException:
                _undo(done)
                raise
            finally:
                for _, kept in done:  # the backup's entries, then its folders
                    if kept is not None:
                        with contextlib.suppress(OSError):
                            os.unlink(kept)
                for leftover in (backup, committing):
                    try:
                        os.rmdir(leftover)
                    except FileNotFoundError:
                        pass
                    except OSError:  # not empty: a merged folder's backup, an undone set
                        _remove(leftover)
            for n in sorted(drop):
                path = os.path.join(folder, n)
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(os.lstat(path).st_mode):
                        os.unlink(path)


# ---------------------------------------------------------------- signals


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised where the program was, so cleanups run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_depth = 0
_raised = False
_holding = 0
_pending: int | None = None


def _handler(signum: int, _frame: Any) -> None:
    global _raised, _pending
    if _raised:  # one exception is enough: a second Ctrl-C must not break the cleanup
        return
    if _holding:  # arrived just before the block: raised when the held moves are done
        _pending = signum
        return
    _raised = True
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` inside; the old handlers come back after.

    A signal that was ignored stays ignored. On the way out with `Interrupted`, a signal whose
    old handler was the default (end the process) is sent again, so the process ends as the
    sender meant, after every cleanup ran; SIGINT with Python's own handler stays a
    KeyboardInterrupt. Only the main thread can install handlers: elsewhere this does nothing.
    """
    global _depth, _raised, _pending
    import threading

    if _depth or threading.current_thread() is not threading.main_thread():
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    old: dict[int, Any] = {}
    for sig in CAUGHT:
        prev = signal.getsignal(sig)
        if prev is signal.SIG_IGN or prev is None:
            continue
        old[sig] = prev
        signal.signal(sig, _handler)
    _depth, _raised = 1, False
    try:
        yield
    except Interrupted as exc:
        _restore(old)
        if old.get(exc.signum) is signal.SIG_DFL:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.raise_signal(exc.signum)
        raise
    finally:
        _depth = 0
        _restore(old)
        _raised, _pending = False, None


def _restore(old: dict[int, Any]) -> None:
    for sig, prev in old.items():
        signal.signal(sig, prev)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait (blocked) until the block is done, then arrive."""
    global _holding, _pending, _raised
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT)
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    if not _holding and _pending is not None and not _raised:
        signum, _pending = _pending, None
        _raised = True
        raise Interrupted(signum)


def cleanly(cleanup: Callable[[], None]) -> None:
    """Run a cleanup to its end even when a signal's exception lands in it (then raised after).

    The handler raises once per `signals_as_exceptions`, so this runs `cleanup` at most twice;
    cleanups are written to be run again.
    """
    pending: Interrupted | None = None
    while True:
        try:
            with signals_held():
                cleanup()
            break
        except Interrupted as exc:
            pending = exc
    if pending is not None:
        raise pending


def checkpoint(point: str) -> None:
    """A test-only pause, inert unless TSB_TEST_PAUSE_AT names this point.

    Tests set TSB_TEST_PAUSE_AT=<point> to stop a build there and send it a signal: it prints
    `tsb-pause <point>` on stderr and sleeps TSB_TEST_PAUSE_SECONDS (default 2; signals that
    are held back at the point arrive after it). Points: `staged` (a set written in its
    temporary folder, nothing moved yet), `commit` (the set renamed to `.commit` and its first
    entry moved, signals held), `written` (a single file written under its temporary name),
    `submitted` (`submit`'s jobs accepted by sbatch, their records not written yet),
    `snapshot` (`sync`'s snapshot made in its temporary folder, nothing sent yet).
    """
    if os.environ.get("TSB_TEST_PAUSE_AT") != point:
        return
    sys.stderr.write(f"tsb-pause {point}\n")
    sys.stderr.flush()
    time.sleep(float(os.environ.get("TSB_TEST_PAUSE_SECONDS", "2")))


# ---------------------------------------------------------------- single files


def write_file(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """One file replaced whole, its folder made when missing."""
    with open_atomically(path, mode, binary=isinstance(data, bytes)) as fh:
        fh.write(data)


@contextlib.contextmanager
def open_atomically(path: Path, mode: int = 0o644, binary: bool = False) -> Iterator[IO[Any]]:
    """A file written under a temporary name beside `path`, renamed over it on success.

    SIGINT, SIGTERM and SIGHUP (`signals_as_exceptions`, whichever command writes) and any
    failure remove the temporary and the folders made for it (decision 80); one a SIGKILL
    left is removed by the next `open_atomically` in that folder (`sweep_once`).
    """
    with signals_as_exceptions():
        made: list[str] = []
        tmp = f"{path.parent}/{temp_name(path.name)}"
        try:
            make_folders(str(path.parent), made)
            sweep_once(path.parent)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # left by a dead process that had this pid
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "wb" if binary else "w") as fh:
                yield fh
            checkpoint("written")
            os.replace(tmp, path)
        except BaseException:

            def discard() -> None:
                _remove(tmp)
                remove_made(made)

            cleanly(discard)
            raise


def make_folders(folder: str, made: list[str]) -> None:
    """`mkdir -p folder`, noting in `made` each folder this call made (outermost first)."""
    missing: list[str] = []
    d = os.path.abspath(folder)
    while not os.path.lexists(d):
        missing.append(d)
        d = os.path.dirname(d)
    for m in reversed(missing):
        try:
            os.mkdir(m)
        except FileExistsError:  # made by another run meanwhile: not ours to remove
            continue
        made.append(m)
    if not os.path.isdir(folder):
        os.mkdir(folder)  # what is in the way (a file, a dangling link) says so


def remove_made(made: list[str]) -> None:
    """Remove the folders `make_folders` made, innermost first, those still empty."""
    for m in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(m)
