"""Starting processes for submit/watch (with probe/, the only places that do)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trtllm_script_builder.process.probe.run import NOT_FOUND, TIMED_OUT, CmdResult

DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class ByteResult:
    rc: int
    out: bytes = b""
    err: bytes = b""

    def text(self) -> CmdResult:
        return CmdResult(
            self.rc, self.out.decode(errors="replace"), self.err.decode(errors="replace")
        )


def run_bytes(
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> ByteResult:
    """Run argv without a shell; never raises for a missing tool, a failure or a timeout."""
    if shutil.which(argv[0]) is None:
        return ByteResult(NOT_FOUND, b"", f"{argv[0]}: command not found".encode())
    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ByteResult(TIMED_OUT, b"", f"{argv[0]}: no answer after {timeout:g}s".encode())
    except OSError as exc:
        return ByteResult(NOT_FOUND, b"", f"{argv[0]}: {exc.strerror}".encode())
    return ByteResult(proc.returncode, proc.stdout, proc.stderr)


def local_runner(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
    """The probe's Runner protocol, with this module's timeout."""
    timeout = float(os.environ.get("TSB_SLURM_TOOL_TIMEOUT", DEFAULT_TIMEOUT))
    return run_bytes(argv, cwd=cwd, timeout=timeout).text()


# ---------------------------------------------------------------- background processes

# Runs "$1" with bash, its output to "$2", and writes its exit status to "$3" when it ends,
# so a later `watch` (not its parent) can read how it ended.
_WRAPPER = 'bash "$1" >"$2" 2>&1 </dev/null; rc=$?; echo "$rc" >"$3.tmp" && mv "$3.tmp" "$3"'


def spawn_detached(
    script: Path, log: Path, rc_file: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> int:
    """Start `bash script > log 2>&1` in its own session (it outlives this process);
    returns its pid, which is also its process group id."""
    rc_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        ["bash", "-c", _WRAPPER, "tsb-run", str(script), str(log), str(rc_file)],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
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
