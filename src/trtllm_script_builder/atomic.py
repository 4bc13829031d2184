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
import os
import re
import shutil
import signal
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
            with contextlib.suppress(OSError):  # the set was whole: finish moving it
                _move_entries(e.path, str(folder))
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


def _move_entries(src: str, dst: str, pause: bool = False) -> None:
    """Every entry of src replaces its namesake in dst; job_spec.json last (it names the rest).

    A folder of the set is merged into the folder of its name; a folder is never replaced by
    a file or a file by a folder (`clash` refuses that before anything is moved).
    """
    entries = sorted(os.scandir(src), key=lambda e: (e.name == "job_spec.json", e.name))
    for i, e in enumerate(entries):
        if pause and i == 1:
            checkpoint("commit")
        d = os.path.join(dst, e.name)
        if e.is_dir(follow_symlinks=False) and _real_dir(d):
            _move_entries(e.path, d)
            os.rmdir(e.path)
        else:
            os.replace(e.path, d)


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


def commit_set(stage: str, folder: str) -> None:
    """Move the whole set staged in `stage` (a folder inside `folder`) into `folder`.

    The stage is first renamed to its `.commit` name, the point from which the set counts as
    written: a SIGKILL after it leaves a folder the next `sweep` finishes moving, one before it
    a temporary the next `sweep` removes. SIGINT, SIGTERM and SIGHUP wait until the moves are
    done, so they never split the set.
    """
    name = os.path.basename(stage)
    m = _TEMP.fullmatch(name)
    assert m is not None and m["kind"] == "tmp", name
    committing = os.path.join(folder, name[: -len(".tmp")] + ".commit")
    found = clash(stage, folder)
    if found:  # refused before anything moves: the folder is left as it was
        raise FileExistsError(errno.EEXIST, f"{found} is in the way of a file or folder", found)
    with signals_held():
        os.rename(stage, committing)
        _move_entries(committing, folder, pause=True)
        os.rmdir(committing)


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
    entry moved, signals held).
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

    Under `signals_as_exceptions`, SIGINT, SIGTERM and SIGHUP remove the temporary too; one a
    SIGKILL left is removed by the next `open_atomically` in that folder (`sweep_once`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_once(path.parent)
    tmp = f"{path.parent}/{temp_name(path.name)}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a dead process that had this pid
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        cleanly(lambda: _remove(tmp))
        raise
