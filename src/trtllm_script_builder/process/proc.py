"""The one runner: every process the package starts goes through here (a tool run to its end
with `run`, a program kept running beside the caller with `Session`, or a job script left
running with `spawn_detached`)."""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trtllm_script_builder.errors import BuildError

NOT_FOUND = 127
TIMED_OUT = 124
TOO_MUCH = 125  # the tool printed more than MAX_OUTPUT bytes on a stream and was stopped
MAX_OUTPUT = 64 << 20  # decision tool-output-bounded
DEFAULT_TIMEOUT = 120.0
TIMEOUT_VAR = "TSB_SLURM_TOOL_TIMEOUT"


def tool_timeout() -> float:
    """Seconds a tool may take before it counts as not answering ($TSB_SLURM_TOOL_TIMEOUT)."""
    return float(os.environ.get(TIMEOUT_VAR) or DEFAULT_TIMEOUT)


@dataclass
class _Box:
    until: float  # time.monotonic()


_BOX: ContextVar[_Box | None] = ContextVar("tsb_time_box", default=None)


@contextlib.contextmanager
def time_box(seconds: float | None) -> Iterator[None]:
    """Every tool `run` starts inside the block ends by `seconds` from now (None: no bound),
    so a tool that never answers cannot hold a command past its `--timeout` (decision
    timeout-bounds-wall-time)."""
    token = _BOX.set(_Box(time.monotonic() + seconds) if seconds else _BOX.get())
    try:
        yield
    finally:
        _BOX.reset(token)


def time_left() -> float | None:
    """Seconds left in the current time box; None outside one."""
    box = _BOX.get()
    return None if box is None else box.until - time.monotonic()


@dataclass(frozen=True)
class CmdResult:
    """What a tool did: exit status (127 = not found, 124 = timed out), stdout, stderr.

    `raw` keeps stdout's bytes: a log read by offset must count bytes, not decoded text.
    """

    rc: int
    out: str = ""
    err: str = ""
    raw: bytes = b""
    timed_out: bool = False

    @property
    def found(self) -> bool:
        return self.rc != NOT_FOUND

    @property
    def text(self) -> str:
        """stdout and stderr together (some tools print their answer on stderr)."""
        return "\n".join(s for s in (self.out, self.err) if s)


class Runner(Protocol):
    """How probe/check/submit/watch run a tool: `run` here, `SshRunner` on a remote host, or
    a fake in tests."""

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> CmdResult: ...


def _decode(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def run(
    argv: Sequence[str],
    cwd: Path | str | None = None,
    *,
    input: bytes | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    own_group: bool = False,
) -> CmdResult:
    """Run argv without a shell, to its end or `timeout` (default `tool_timeout()`); never
    raises for a missing tool, a failure or a timeout. `input` is given on stdin: bytes, or a
    file's contents read by the program itself (a git bundle can be gigabytes).

    `own_group`: the tool runs in a process group of its own, and whatever is left of that
    group when it ends, fails, times out or this process is interrupted is killed (a program
    writing into a folder the caller removes after it, decision submit-py-children).
    """
    limit = tool_timeout() if timeout is None else timeout
    if shutil.which(argv[0]) is None:
        return CmdResult(NOT_FOUND, "", f"{argv[0]}: command not found")
    left = time_left()
    if left is not None:
        if left <= 0:
            return CmdResult(TIMED_OUT, "", f"{argv[0]}: not run, the time is up", b"", True)
        limit = min(limit, left)
    with contextlib.ExitStack() as files:
        stdin: Any = subprocess.DEVNULL
        data = input if isinstance(input, bytes) else None
        try:
            if isinstance(input, Path):
                stdin = files.enter_context(input.open("rb"))
            elif input is not None:
                stdin = subprocess.PIPE
            proc = subprocess.Popen(
                list(argv),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=own_group,
                preexec_fn=_die_with(os.getpid()) if own_group else None,
            )
        except OSError as exc:
            return CmdResult(NOT_FOUND, "", f"{argv[0]}: {exc.strerror}")
        with proc:  # as subprocess.run, and the group killed on every way out
            try:
                out, err = _communicate(proc, data, limit)
            except _TooMuch as exc:
                _end(proc, own_group)
                proc.wait()
                note = f"{argv[0]}: printed more than {MAX_OUTPUT} bytes; stopped"
                said = _decode(exc.err).rstrip()
                return CmdResult(
                    TOO_MUCH, _decode(exc.out), f"{said}\n{note}" if said else note, exc.out
                )
            except subprocess.TimeoutExpired as exc:
                _end(proc, own_group)
                proc.wait()
                # what it printed before it was stopped often says why it hung
                said = _decode(exc.stderr)
                note = f"{argv[0]}: no answer after {limit:g}s"
                return CmdResult(
                    TIMED_OUT, _decode(exc.output), f"{said.rstrip()}\n{note}" if said else note,
                    b"", True,
                )  # fmt: skip
            except BaseException:  # an interrupt: the tool goes with it
                _end(proc, own_group)
                raise
            finally:
                if own_group:
                    kill_group(proc.pid, signal.SIGKILL)
    return CmdResult(proc.returncode, _decode(out), _decode(err), out)


class _TooMuch(Exception):
    def __init__(self, out: bytes, err: bytes) -> None:
        self.out, self.err = out, err


def _communicate(
    proc: subprocess.Popen[bytes], data: bytes | None, limit: float
) -> tuple[bytes, bytes]:
    """`proc.communicate(data, limit)`, with at most MAX_OUTPUT bytes kept of each stream: a
    tool that prints without end (a hostile cluster's `squeue`, /dev/zero) raises _TooMuch
    instead of filling this process's memory until its timeout."""
    deadline = time.monotonic() + limit
    if data is not None and proc.stdin is not None:
        stdin = proc.stdin

        def feed() -> None:
            with contextlib.suppress(OSError):  # it ended without reading it all
                stdin.write(data)
            with contextlib.suppress(OSError):
                stdin.close()

        threading.Thread(target=feed, daemon=True).start()
    fds = [s.fileno() if s is not None else -1 for s in (proc.stdout, proc.stderr)]
    got = {fd: bytearray() for fd in fds}

    def both() -> tuple[bytes, bytes]:
        return bytes(got[fds[0]][:MAX_OUTPUT]), bytes(got[fds[1]][:MAX_OUTPUT])

    with selectors.DefaultSelector() as sel:
        for fd in fds:
            if fd >= 0:
                sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            ready = sel.select(left) if left > 0 else []
            if not ready:
                raise subprocess.TimeoutExpired(proc.args, limit, *both())
            for key, _ in ready:
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                got[key.fd] += chunk
                if len(got[key.fd]) > MAX_OUTPUT:
                    raise _TooMuch(*both())
    try:
        proc.wait(max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired(proc.args, limit, *both()) from None
    return both()


def _die_with(parent: int) -> Callable[[], None] | None:
    """In the child: be killed when this process dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), since its own group no longer goes with this one's."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)

    return arm


def _end(proc: subprocess.Popen[bytes], own_group: bool) -> None:
    if own_group:
        kill_group(proc.pid, signal.SIGKILL)
    proc.kill()


class Session:
    """A program kept running while the caller works (a lock held on a cluster): it reads its
    standard input until `end` closes it, and its output (stderr with stdout) is read a line
    at a time. When this process dies, even by SIGKILL, the input closes and the program is
    told to end the same way."""

    def __init__(self, argv: Sequence[str]) -> None:
        self._buf = b""
        self._proc: subprocess.Popen[bytes] | None = None
        if shutil.which(argv[0]) is None:
            self._buf = f"{argv[0]}: command not found\n".encode()
            return
        try:
            self._proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self._buf = f"{argv[0]}: {exc.strerror}\n".encode()

    def line(self, timeout: float) -> str | None:
        """The next line it prints; None when it has ended or printed none for `timeout` s."""
        deadline = time.monotonic() + timeout
        out = self._proc.stdout if self._proc is not None else None
        while b"\n" not in self._buf and out is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                break
            self._buf += chunk
        if not self._buf:
            return None
        head, _, self._buf = self._buf.partition(b"\n")
        return head.decode(errors="replace")

    def send(self, text: str) -> bool:
        """Write a line to its input; False when it has ended."""
        if self._proc is None or self._proc.stdin is None:
            return False
        try:
            self._proc.stdin.write(text.encode())
            self._proc.stdin.flush()
        except OSError:  # a broken pipe: it has ended
            return False
        return True

    def end(self, timeout: float) -> int:
        """Close its input and wait for it (killed after `timeout` s); its exit status."""
        proc = self._proc
        if proc is None:
            return NOT_FOUND
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        return proc.returncode


# ---------------------------------------------------------------- background processes

# Runs "$1" with bash (its output goes where the caller opened it), and writes its exit status
# to "$2" when it ends, so a later `watch` (not its parent) can read how it ended. `set -C`: the
# status is never written through a link someone put at the temporary name (decision
# job-files-never-through-links).
_WRAPPER = 'bash "$1" </dev/null; rc=$?; set -C; rm -f -- "$2.tmp"; echo "$rc" >"$2.tmp" && mv -f -- "$2.tmp" "$2"'


def spawn_detached(
    script: Path, log: Path, rc_file: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> int:
    """Start `bash script > log 2>&1` in its own session (it outlives this process);
    returns its pid, which is also its process group id.

    The log is made anew, readable by this user only, never through a link: a work_dir may be
    a team's, and a link another member put at the log's path had the job's output replace the
    file it named (decision job-files-never-through-links)."""
    rc_file.unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(log)  # whatever is there: a link is removed, never followed
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(log, flags, 0o600)
    except OSError as exc:
        raise BuildError(
            "log_file",
            f"{log} cannot be made ({exc.strerror})",
            "remove what is in its place, or choose another log_file",
        ) from None
    try:
        proc = subprocess.Popen(
            ["bash", "-c", _WRAPPER, "tsb-run", str(script), str(rc_file)],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(fd)
    return proc.pid


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), to tell
    a pid from a later process that reuses it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def alive(pid: int, started: str | None) -> bool:
    """pid still runs and is the process we started (same start time, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in {"Z", "X"}:
        return False
    return started is None or (len(fields) > 19 and fields[19] == started)


def reap(pid: int) -> None:
    """Collect a finished child of this process (run/submit in one go), if it is one."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def kill_group(pid: int, sig: int = signal.SIGTERM) -> bool:
    """Signal the process group `pid` leads (the detached run and everything it started)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
