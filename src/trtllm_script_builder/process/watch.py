"""`watch`: follow a submitted job to its end, stream its log, and give one verdict.

A Slurm job (local, or remote through ssh) is polled with `scontrol show job` and, once it
has ended, `sacct` (when accounting answers); its `.out` and `.err` files are followed by
offset. A local process (Docker, or a script inside a held allocation) is followed by its pid
and the exit-status file its wrapper writes. `hang detected` in the log cancels the job at
once; the `--timeout` deadline cancels it too unless `keep_running`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.proc import Runner, alive, kill_group, reap, run
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.ssh import SshRunner, SshTarget
from trtllm_script_builder.process.submit import (
    Submission,
    load_submission,
    resolve_ssh_host,
    write_json,
)
from trtllm_script_builder.process.verdict import (
    HANG_TEXT,
    Decision,
    Kind,
    LogLine,
    Verdict,
    classify,
    decide_verdict,
)

VERDICT_FILE = "verdict.json"
MAX_READ = 8 * 1024 * 1024  # bytes read from one log per poll
UNKNOWN_GRACE = 30.0  # seconds a just-submitted job may be unknown to Slurm
CANCEL_WAIT = 60.0  # seconds to wait for a cancelled job to end
PROGRESS_EVERY = 30.0  # seconds between progress lines when stderr is not a terminal

Reader = Callable[[str, int], "bytes | None"]


def read_local(path: str, offset: int) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(MAX_READ)
    except OSError:
        return None


class Follower:
    """New complete lines of one log file, read from where the last call stopped."""

    def __init__(self, path: str, read: Reader, label: str = "") -> None:
        self.path = path
        self.read = read
        self.label = label
        self.offset = 0
        self.buf = b""
        self.lineno = 0

    def poll(self) -> list[LogLine]:
        data = self.read(self.path, self.offset)
        if not data:
            return []
        self.offset += len(data)
        self.buf += data
        *complete, self.buf = self.buf.split(b"\n")
        return [self._line(raw) for raw in complete]

    def flush(self) -> list[LogLine]:
        rest = self.poll()
        if self.buf:
            rest.append(self._line(self.buf))
            self.buf = b""
        return rest

    def _line(self, raw: bytes) -> LogLine:
        self.lineno += 1
        text = raw.decode(errors="replace").rstrip("\r")
        return LogLine(text, os.path.basename(self.path), self.lineno)


class Console:
    """Log lines to `out`; one progress line to `err` (rewritten in place on a terminal)."""

    def __init__(self, out: TextIO, err: TextIO, quiet: bool = False) -> None:
        self.out, self.err, self.quiet = out, err, quiet
        self.tty = err.isatty()
        self.shown = False
        self.last_text = ""
        self.last_time = 0.0

    def lines(self, lines: list[LogLine], prefix: str = "") -> None:
        if self.quiet or not lines:
            return
        self.clear()
        for ln in lines:
            self.out.write(f"{prefix}{ln.text}\n")
        self.out.flush()

    def progress(self, text: str) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            self.err.write(f"\r\033[K{text}")
            self.shown = True
        elif text.split(",")[0] != self.last_text.split(",")[0] or now - self.last_time >= (
            PROGRESS_EVERY
        ):
            self.err.write(text + "\n")
            self.last_time = now
        else:
            return
        self.last_text = text
        self.err.flush()

    def say(self, text: str) -> None:
        self.clear()
        self.err.write(text + "\n")
        self.err.flush()

    def clear(self) -> None:
        if self.tty and self.shown:
            self.err.write("\r\033[K")
            self.err.flush()
            self.shown = False


@dataclass
class WatchResult:
    decision: Decision
    scenario: str
    work_dir: str
    job_id: str | None = None
    pid: int | None = None
    host: str | None = None
    signal: int | None = None
    log_files: list[str] = field(default_factory=list)
    cancelled: str | None = None  # "hang" / "timeout" when watch cancelled the job
    timed_out: bool = False
    elapsed: float = 0.0

    @property
    def verdict(self) -> Verdict:
        return self.decision.verdict

    @property
    def exit_status(self) -> int:
        return self.decision.exit_status

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "verdict": d.verdict.value,
            "exit_code": d.exit_code,
            "job_id": self.job_id,
            "state": d.state,
            "evidence": d.evidence,
            "reason": d.reason,
            "watch_exit_status": self.exit_status,
            "scenario": self.scenario,
            "pid": self.pid,
            "host": self.host,
            "signal": self.signal,
            "log_files": self.log_files,
            "cancelled_by_watch": self.cancelled,
            "timed_out": self.timed_out,
            "elapsed_seconds": round(self.elapsed, 1),
            "work_dir": self.work_dir,
        }


def _hang(lines: list[LogLine]) -> bool:
    return any(
        k in (Kind.PROGRAM, Kind.SETUP) and HANG_TEXT in ln.text.lower()
        for k, ln in classify(lines)
    )


def watch(
    work_dir: Path,
    *,
    timeout: float | None = None,
    keep_running: bool = False,
    poll: float = 5.0,
    ssh_host: str | None = None,
    console: Console | None = None,
) -> WatchResult:
    work_dir = work_dir.resolve()
    console = console or Console(sys.stdout, sys.stderr)
    spec = read_job_spec(work_dir)
    sub = load_submission(work_dir)
    if sub is None:
        raise BuildError(
            "work_dir",
            f"{work_dir} has not been submitted (no submission.json)",
            "run `trtllm-script-builder submit WORK_DIR` first",
        )
    poll = max(poll, 0.05)
    if sub.pid is not None:
        result = _watch_process(spec, sub, timeout, keep_running, poll, console)
    else:
        result = _watch_slurm(spec, sub, timeout, keep_running, poll, ssh_host, console)
    write_json(work_dir / VERDICT_FILE, result.to_json())
    return result


# ---------------------------------------------------------------- Slurm jobs


def _watch_slurm(
    spec: JobSpec,
    sub: Submission,
    timeout: float | None,
    keep_running: bool,
    poll: float,
    ssh_host: str | None,
    console: Console,
) -> WatchResult:
    assert sub.job_id is not None
    job = sub.job_id
    runner: Runner
    if sub.scenario == "remote_slurm":
        host = ssh_host or sub.ssh_host or resolve_ssh_host(spec, None)
        ssh = SshRunner(SshTarget(host))
        runner, read = ssh, ssh.read_from
    else:
        host = sub.host
        runner, read = run, read_local
    accounting = slurm.accounting_on(runner)
    out_path, err_path = sub.log_file, sub.err_file
    followers: dict[str, Follower] = {}
    lines: list[LogLine] = []

    def follow(final: bool = False) -> list[LogLine]:
        new: list[LogLine] = []
        for path, prefix in ((out_path, ""), (err_path, "[stderr] ")):
            if not path:
                continue
            f = followers.setdefault(path, Follower(path, read))
            got = f.flush() if final else f.poll()
            console.lines(got, prefix)
            new += got
        lines.extend(new)
        return new

    start = time.monotonic()
    deadline = start + timeout if timeout else None
    unknown_since: float | None = None
    cancelled: str | None = None
    cancel_deadline = 0.0
    timed_out = False
    paths_fixed = False
    st = slurm.JobStatus(job)
    while True:
        st = slurm.query(runner, job, accounting)
        if not paths_fixed and st.stdout and st.stdout not in ("(null)", ""):
            out_path = st.stdout
            err_path = st.stderr if st.stderr and st.stderr not in (st.stdout, "(null)") else None
            paths_fixed = True
        new = follow()
        now = time.monotonic()
        if cancelled is None and not st.terminal and _hang(new):
            console.say(f"[watch] {HANG_TEXT!r} in the log: cancelling job {job}")
            runner(["scancel", job])
            cancelled, cancel_deadline = "hang", now + CANCEL_WAIT
        if st.terminal:
            time.sleep(min(poll, 0.5))
            follow(final=True)
            break
        if not st.known:
            unknown_since = unknown_since or now
            if now - unknown_since > UNKNOWN_GRACE:
                raise ToolFailed(
                    "job_id",
                    f"Slurm knows no job {job} (scontrol{', sacct' if accounting else ''})",
                    "check the cluster; the job may be older than MinJobAge without accounting",
                )
        else:
            unknown_since = None
        if deadline is not None and now >= deadline and cancelled is None:
            timed_out = True
            if keep_running:
                console.say(f"[watch] timeout after {timeout:g}s; job {job} keeps running")
                follow(final=True)
                break
            console.say(f"[watch] timeout after {timeout:g}s: cancelling job {job}")
            runner(["scancel", job])
            cancelled, cancel_deadline = "timeout", now + CANCEL_WAIT
        if cancelled is not None and now >= cancel_deadline:
            follow(final=True)
            break
        left = f", {st.time_left} left" if st.time_left else ""
        console.progress(
            f"[watch] job {job} {st.state or 'UNKNOWN'}, {st.run_time or '-'} run{left}, "
            f"{len(lines)} log lines"
        )
        time.sleep(poll if cancelled is None else min(poll, 1.0))
    console.clear()
    if timed_out and not keep_running and slurm_state(st) not in ("CANCELLED", None):
        # it ended on its own before the cancel landed: its own end decides
        timed_out = False
    decision = decide_verdict(
        slurm_state(st) if st.terminal else None,
        st.exit_code if st.terminal else None,
        lines,
        spec,
        timed_out=timed_out,
        signal=st.signal if st.terminal else None,
    )
    if not st.terminal:
        decision.state = st.state  # e.g. still RUNNING after a --keep-running timeout
    return WatchResult(
        decision,
        sub.scenario,
        sub.work_dir,
        job_id=job,
        host=host,
        signal=st.signal,
        log_files=[p for p in (out_path, err_path) if p],
        cancelled=cancelled,
        timed_out=timed_out,
        elapsed=time.monotonic() - start,
    )


def slurm_state(st: slurm.JobStatus) -> str | None:
    return st.state.split()[0] if st.state else None


# ---------------------------------------------------------------- local processes


def _read_rc(path: str | None) -> int | None:
    if not path:
        return None
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def _watch_process(
    spec: JobSpec,
    sub: Submission,
    timeout: float | None,
    keep_running: bool,
    poll: float,
    console: Console,
) -> WatchResult:
    assert sub.pid is not None
    pid = sub.pid
    if sub.host != socket.gethostname():
        raise BuildError(
            "work_dir",
            f"pid {pid} was started on {sub.host}, not on this host",
            f"watch it on {sub.host}",
        )
    log = sub.log_file or ""
    follower = Follower(log, read_local)
    lines: list[LogLine] = []

    def follow(final: bool = False) -> list[LogLine]:
        got = follower.flush() if final else follower.poll()
        console.lines(got)
        lines.extend(got)
        return got

    def stop() -> None:
        if sub.persistent and sub.alloc_job_id:
            from trtllm_script_builder.process.persistent import active_steps

            for step in active_steps(run, sub.alloc_job_id):
                run(["scancel", step])
        kill_group(pid, signal.SIGTERM)
        if sub.container_name:
            run(["docker", "kill", sub.container_name], timeout=30)

    start = time.monotonic()
    deadline = start + timeout if timeout else None
    cancelled: str | None = None
    cancel_deadline = 0.0
    timed_out = False
    rc: int | None = None
    what = f"allocation {sub.alloc_job_id}, pid {pid}" if sub.persistent else f"pid {pid}"
    while True:
        new = follow()
        now = time.monotonic()
        if cancelled is None and _hang(new):
            console.say(f"[watch] {HANG_TEXT!r} in the log: stopping {what}")
            stop()
            cancelled, cancel_deadline = "hang", now + CANCEL_WAIT
        rc = _read_rc(sub.rc_file)
        if rc is not None:
            break
        if not alive(pid, sub.pid_start):
            reap(pid)
            time.sleep(0.2)
            rc = _read_rc(sub.rc_file)
            break
        if deadline is not None and now >= deadline and cancelled is None:
            timed_out = True
            if keep_running:
                console.say(f"[watch] timeout after {timeout:g}s; {what} keeps running")
                break
            console.say(f"[watch] timeout after {timeout:g}s: stopping {what}")
            stop()
            cancelled, cancel_deadline = "timeout", now + CANCEL_WAIT
        if cancelled is not None and now >= cancel_deadline:
            kill_group(pid, signal.SIGKILL)
            cancel_deadline = now + CANCEL_WAIT
        console.progress(f"[watch] {what} running, {now - start:.0f}s, {len(lines)} log lines")
        time.sleep(poll if cancelled is None else min(poll, 0.5))
    follow(final=True)
    console.clear()
    if timed_out and not keep_running and rc is not None and rc not in (130, 137, 143):
        timed_out = False  # it ended on its own before the stop landed
    decision = decide_verdict(None, rc, lines, spec, timed_out=timed_out)
    if rc is None and not timed_out and decision.verdict is Verdict.FAILED:
        decision = Decision(
            Verdict.CANCELLED,
            "the process ended without an exit status (killed from outside)",
            decision.evidence,
            None,
            None,
        )
    return WatchResult(
        decision,
        sub.scenario,
        sub.work_dir,
        job_id=sub.alloc_job_id,
        pid=pid,
        host=sub.host,
        log_files=[log] if log else [],
        cancelled=cancelled,
        timed_out=timed_out,
        elapsed=time.monotonic() - start,
    )


def render_verdict(result: WatchResult) -> str:
    d = result.decision
    who = f"job {result.job_id}" if result.job_id else f"pid {result.pid}"
    if result.job_id and result.pid:
        who = f"pid {result.pid} in allocation {result.job_id}"
    lines = [f"verdict: {d.verdict.value} ({who}: {d.reason})"]
    lines += [f"  {e}" for e in d.evidence]
    return "\n".join(lines) + "\n"


def verdict_json(result: WatchResult) -> str:
    return json.dumps(result.to_json(), separators=(",", ":"))
