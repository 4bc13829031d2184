"""Job handles `watch` follows: a Slurm job (local, or remote through ssh) and a local process
(Docker, or a script inside a held allocation). Each knows how to ask whether its job has
ended, read its logs, cancel it, and turn what it saw into a verdict; the loop that drives
them (hang, deadline, cancel) is `follow.follow`, written once.
"""

from __future__ import annotations

import os
import posixpath
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.model.values import whole_number
from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.host import Here, read_regular
from trtllm_script_builder.process.junit import JUnitError, TestReport, parse_junit
from trtllm_script_builder.process.proc import Runner, alive, kill_group, reap, run
from trtllm_script_builder.process.ssh import MAX_READ
from trtllm_script_builder.process.verdict import (
    MAX_EVIDENCE,
    Decision,
    LogLine,
    Verdict,
    decide_verdict,
)
from trtllm_script_builder.resolve.workflow import find

# A log line longer than this is taken as several (a job that prints megabytes without a
# newline would otherwise sit in memory whole; decision shown-never-obeyed).
MAX_LINE = 1024 * 1024
UNKNOWN_GRACE = 30.0  # seconds a just-submitted job may be unknown to Slurm

Reader = Callable[[str, int], "bytes | None"]
Logs = list[tuple[list[LogLine], str]]  # new lines of each log, with the prefix to show them


read_local: Reader = Here().read_from


def junit_path(spec: JobSpec, job_id: str | None) -> str | None:
    """Where a job whose workflow writes a JUnit report wrote it (remote_work_dir on a remote
    cluster); None for other jobs."""
    pattern = spec.junit_file_pattern
    if not pattern or not _writes_junit(spec):
        return None
    name = pattern.replace("%j", job_id or "")
    return posixpath.join(spec.remote_work_dir or spec.work_dir, name)


def _writes_junit(spec: JobSpec) -> bool:
    flow = find(spec.workflow_type)
    return flow is not None and flow.junit


def read_junit(read: Reader, spec: JobSpec, job_id: str | None) -> tuple[TestReport | None, str]:
    """A pytest job's JUnit report, read where the job wrote it (remote_work_dir over ssh),
    and a note when a file is there but refused; (None, "") when the job wrote none."""
    path = junit_path(spec, job_id)
    if path is None:
        return None, ""
    data = read(path, 0)
    if not data:
        return None, ""
    if len(data) >= MAX_READ:
        return None, f"JUnit report {path} not read: larger than {MAX_READ} bytes"
    try:
        return parse_junit(data, posixpath.basename(path)), ""
    except JUnitError as e:
        return None, f"JUnit report {path} not read: {e}"


def _decide(
    state: str | None,
    exit_code: int | None,
    lines: list[LogLine],
    spec: JobSpec,
    timed_out: bool,
    signal: int | None,
    junit: tuple[TestReport | None, str],
) -> Decision:
    report, note = junit
    decision = decide_verdict(
        state,
        exit_code,
        lines,
        spec,
        timed_out=timed_out,
        signal=signal,
        pytest=_writes_junit(spec),
        tests=report,
    )
    if note:
        decision.evidence = [*decision.evidence[: MAX_EVIDENCE - 1], note]
    return decision


class Follower:
    """New complete lines of one log file, read from where the last call stopped."""

    def __init__(self, path: str, read: Reader) -> None:
        self.path = path
        self.read = read
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
        out = [self._line(piece) for raw in complete for piece in _pieces(raw)]
        while len(self.buf) > MAX_LINE:
            out.append(self._line(self.buf[:MAX_LINE]))
            self.buf = self.buf[MAX_LINE:]
        return out

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


def _pieces(raw: bytes) -> list[bytes]:
    """One line of a log, in pieces of at most MAX_LINE bytes."""
    return [raw[i : i + MAX_LINE] for i in range(0, len(raw), MAX_LINE)] or [raw]


class JobHandle(Protocol):
    what: str  # how messages name the job: "job 12", "pid 345"
    stop_verb: str  # "cancelling" a Slurm job, "stopping" a process
    cancel_poll: float  # longest sleep between polls once a cancel was sent

    def logs(self, final: bool = False) -> Logs: ...

    def overdue(self) -> bool:
        """The cancel was not obeyed in time: True to stop watching, False when the handle
        pressed harder and the wait starts again."""
        ...

    def progress(self, elapsed: float, log_lines: int) -> str: ...

    def ended_on_its_own(self) -> bool:
        """After a timeout cancel: the job ended by itself before the cancel landed."""
        ...

    def decide(self, lines: list[LogLine], spec: JobSpec, timed_out: bool) -> Decision: ...

    def result_fields(self) -> dict[str, Any]:
        """job_id, pid, host, signal and log_files for the WatchResult."""
        ...


def final_decision(
    handle: JobHandle, lines: list[LogLine], spec: JobSpec, timed_out: bool, keep_running: bool
) -> tuple[Decision, bool]:
    """The verdict of a job that was followed to its end, and whether it timed out: a job
    that ended on its own before watch's timeout cancel landed is judged by its own end."""
    if timed_out and not keep_running and handle.ended_on_its_own():
        timed_out = False
    return handle.decide(lines, spec, timed_out), timed_out


@dataclass(frozen=True)
class LogNames:
    """Where a job writes its logs once its own job id is known (an array task's only when it
    starts): its job_spec's patterns (%j: that id) under `base`, the folder the build wrote
    them for."""

    out_pattern: str | None
    err_pattern: str | None
    base: str

    def paths(self, own_id: str) -> tuple[str | None, str | None]:
        from trtllm_script_builder.process.submission import err_path, log_path

        out = log_path(self.out_pattern, own_id, self.base)
        return out, log_path(self.err_pattern, own_id, self.base) or err_path(out)


class SlurmPoller:
    """Slurm's side of the run loop: one squeue call and at most one sacct call per poll for
    all the jobs (slurm.query_many), one scancel for all the jobs to cancel."""

    cancel_poll = 1.0

    def __init__(self, runner: Runner, accounting: bool | None = None) -> None:
        self.runner = runner
        self.accounting = slurm.accounting_on(runner) if accounting is None else accounting

    def poll(self, handles: Sequence[Any]) -> list[bool]:
        statuses = slurm.query_many(self.runner, [h.job_id for h in handles], self.accounting)
        return [h.update(statuses[h.job_id]) for h in handles]

    def cancel(self, handles: Sequence[Any]) -> None:
        if handles:  # array tasks as `ARRAY_TASK`, pending or not
            self.runner(["scancel", *(h.job_id for h in handles)])


class SlurmJob:
    """A Slurm job, asked about by SlurmPoller with the other jobs of its run."""

    stop_verb = "cancelling"
    cancel_poll = 1.0

    def __init__(
        self,
        job_id: str,
        runner: Runner,
        read: Reader,
        out_path: str | None,
        err_path: str | None,
        host: str | None,
        *,
        array_logs: LogNames | None = None,
    ) -> None:
        self.job_id, self.runner, self.read, self.host = job_id, runner, read, host
        self.what = f"job {job_id}"
        self.out_path, self.err_path = out_path, err_path
        self.st = slurm.JobStatus(job_id)
        self.followers: dict[str, Follower] = {}
        self.paths_fixed = False
        self.unknown_since: float | None = None
        # An array task (`ARRAY_TASK`): its own job id, hence its log names, are known once it
        # starts; Slurm's StdOut is the array driver's log, not the job's.
        self.array_logs = array_logs
        self.own_id: str | None = None if array_logs else job_id

    def update(self, st: slurm.JobStatus) -> bool:
        """Take `st` (from the one query for all the jobs of a run) as the job's status; True
        once the job has ended."""
        self.st = st
        if self.array_logs is not None:
            if self.own_id is None and st.raw_id:
                self.own_id = st.raw_id
                self.what = f"job {st.raw_id} ({self.job_id})"
                self.out_path, self.err_path = self.array_logs.paths(st.raw_id)
        elif not self.paths_fixed and st.stdout and st.stdout not in ("(null)", ""):
            # Slurm's own word on where the logs go beats the pattern the build wrote, except
            # for a folder with `%` in its name: the #SBATCH line escapes it as `%%`, and
            # scontrol's StdOut expands the escaped pattern again (`%%x` shows as `%<name>`),
            # naming a file that does not exist; the recorded path is the real one there.
            if "%" not in (self.out_path or ""):
                self.out_path = st.stdout
                keep_err = st.stderr and st.stderr not in (st.stdout, "(null)")
                self.err_path = st.stderr if keep_err else None
            self.paths_fixed = True
        if st.terminal or st.known:
            self.unknown_since = None
        else:
            now = time.monotonic()
            self.unknown_since = self.unknown_since or now
            if now - self.unknown_since > UNKNOWN_GRACE:
                if st.source == slurm.NO_ANSWER:
                    raise ToolFailed(
                        "job_id",
                        f"squeue gave no answer about job {self.job_id} for "
                        f"{now - self.unknown_since:.0f}s",
                        "check that slurmctld answers (`squeue`), then watch again",
                    )
                raise ToolFailed(
                    "job_id",
                    f"Slurm knows no job {self.job_id} (scontrol, squeue, sacct)",
                    "check the cluster; the job may be older than MinJobAge without accounting",
                )
        return st.terminal

    def logs(self, final: bool = False) -> Logs:
        got: Logs = []
        for path, prefix in ((self.out_path, ""), (self.err_path, "[stderr] ")):
            if path:
                f = self.followers.setdefault(path, Follower(path, self.read))
                got.append((f.flush() if final else f.poll(), prefix))
        return got

    def overdue(self) -> bool:
        return True

    def progress(self, elapsed: float, log_lines: int) -> str:
        st = self.st
        left = f", {st.time_left} left" if st.time_left else ""
        return (
            f"[watch] job {self.job_id} {st.state or 'UNKNOWN'}, {st.run_time or '-'} run{left}, "
            f"{log_lines} log lines"
        )

    def state(self) -> str | None:
        return self.st.state.split()[0] if self.st.state else None

    def ended_on_its_own(self) -> bool:
        return self.state() not in ("CANCELLED", None)

    def decide(self, lines: list[LogLine], spec: JobSpec, timed_out: bool) -> Decision:
        st = self.st
        done = st.terminal
        junit = read_junit(self.read, spec, self.own_id) if done and self.own_id else (None, "")
        decision = _decide(
            self.state() if done else None,
            st.exit_code if done else None,
            lines,
            spec,
            timed_out,
            st.signal if done else None,
            junit,
        )
        if not done:
            decision.state = st.state  # e.g. still RUNNING after a --keep-running timeout
        return decision

    def result_fields(self) -> dict[str, Any]:
        return {
            "job_id": self.own_id or self.job_id,
            "host": self.host,
            "signal": self.st.signal,
            "log_files": [p for p in (self.out_path, self.err_path) if p],
        }


def read_rc(path: str | None) -> int | None:
    if not path:
        return None
    data = read_regular(path, 0, 64)
    if data is None:
        return None
    text = data.decode(errors="replace").strip()
    return whole_number(text, negative=True)


# Exit statuses of a process ended by SIGINT, SIGKILL or SIGTERM: what a stop leaves.
_STOPPED = (130, 137, 143)


class LocalProcess:
    """A process `submit` started on this host, followed by pid and the exit-status file its
    wrapper writes (it is not our child when `watch` runs on its own)."""

    stop_verb = "stopping"
    cancel_poll = 0.5

    def __init__(
        self,
        pid: int,
        pid_start: str | None,
        rc_file: str | None,
        log: str,
        host: str,
        alloc_job_id: str | None = None,
        container_name: str | None = None,
        owned: bool = True,
    ) -> None:
        self.pid, self.pid_start, self.rc_file = pid, pid_start, rc_file
        self.owned = owned  # the record is this user's alone (decision records-acted-on-are-own)
        self.host, self.alloc_job_id, self.container_name = host, alloc_job_id, container_name
        self.log = log
        self.follower = Follower(log, read_local)
        self.what = f"allocation {alloc_job_id}, pid {pid}" if alloc_job_id else f"pid {pid}"
        self.rc: int | None = None

    @classmethod
    def of(cls, sub: Any) -> LocalProcess:
        """The process a submission.json names (Docker, or a script in a held allocation);
        refused when it was started on another host."""
        if sub.host != socket.gethostname():
            raise BuildError(
                "work_dir",
                f"pid {sub.pid} was started on {sub.host}, not on this host",
                f"watch it on {sub.host}",
            )
        return cls(
            sub.pid,
            sub.pid_start,
            sub.rc_file,
            sub.log_file or "",
            sub.host,
            alloc_job_id=sub.alloc_job_id if sub.persistent else None,
            container_name=sub.container_name,
            owned=sub.foreign is None,
        )

    def refresh(self) -> bool:
        self.rc = read_rc(self.rc_file)
        if self.rc is not None:
            return True
        if not self.ours():
            reap(self.pid)
            time.sleep(0.2)  # the wrapper writes the status file just after its child ends
            self.rc = read_rc(self.rc_file)
            return True
        return False

    def ours(self) -> bool:
        """The pid still names the process submit started: its start time is the recorded one.
        A record without one (edited, or a process that ended at once) names nothing of ours:
        a work_dir may be shared, and a rewritten pid must not stop another process."""
        return self.pid_start is not None and alive(self.pid, self.pid_start)

    def logs(self, final: bool = False) -> Logs:
        return [(self.follower.flush() if final else self.follower.poll(), "")]

    def cancel(self) -> None:
        if not self.owned:
            return
        if self.alloc_job_id:
            # the script's sruns are steps of the held allocation: stop them, keep it
            from trtllm_script_builder.process.persistent import active_steps

            for step in active_steps(run, self.alloc_job_id):
                run(["scancel", step])
        if self.ours():
            kill_group(self.pid, signal.SIGTERM)
        if self.container_name:
            run(["docker", "kill", self.container_name], timeout=30)

    def overdue(self) -> bool:
        if self.owned and self.ours():
            kill_group(self.pid, signal.SIGKILL)
        return False

    def progress(self, elapsed: float, log_lines: int) -> str:
        return f"[watch] {self.what} running, {elapsed:.0f}s, {log_lines} log lines"

    def ended_on_its_own(self) -> bool:
        return self.rc is not None and self.rc not in _STOPPED

    def decide(self, lines: list[LogLine], spec: JobSpec, timed_out: bool) -> Decision:
        ended = self.rc is not None
        junit = read_junit(read_local, spec, self.alloc_job_id) if ended else (None, "")
        decision = _decide(None, self.rc, lines, spec, timed_out, None, junit)
        if self.rc is None and not timed_out and decision.verdict is Verdict.FAILED:
            return Decision(
                Verdict.CANCELLED,
                "the process ended without an exit status (killed from outside)",
                decision.evidence,
                None,
                None,
            )
        return decision

    def result_fields(self) -> dict[str, Any]:
        return {
            "job_id": self.alloc_job_id,
            "pid": self.pid,
            "host": self.host,
            "log_files": [self.log] if self.log else [],
        }
