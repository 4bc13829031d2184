"""`watch`: follow a submitted job to its end, stream its log, and give one verdict.

One loop (`watch_job`) follows a job handle (handles.py): a Slurm job (local, or remote
through ssh) or a local process (Docker, or a script inside a held allocation). `hang
detected` in the log cancels the job at once; the `--timeout` deadline cancels it too unless
`keep_running`.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process.figures import result_lines
from trtllm_script_builder.process.handles import (
    JobHandle,
    LocalProcess,
    LogNames,
    SlurmJob,
    final_decision,
    read_local,
)
from trtllm_script_builder.process.perf_sanity import add_perf_sanity
from trtllm_script_builder.process.proc import Runner, run
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.ssh import SshRunner, SshTarget
from trtllm_script_builder.process.submit import (
    Submission,
    load_submission,
    refuse_ssh_host_off_remote,
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
)

VERDICT_FILE = "verdict.json"
CANCEL_WAIT = 60.0  # seconds to wait for a cancelled job to end
PROGRESS_EVERY = 30.0  # seconds between progress lines when stderr is not a terminal


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
            # the job's own words: shown, never acted on by the terminal (decision 75)
            self.out.write(f"{prefix}{printable(ln.text, None)}\n")
        self.out.flush()

    def progress(self, text: str) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            self.err.write(f"\r\033[K{printable(text, None)}")
            self.shown = True
        elif text.split(",")[0] != self.last_text.split(",")[0] or now - self.last_time >= (
            PROGRESS_EVERY
        ):
            self.err.write(printable(text, None) + "\n")
            self.last_time = now
        else:
            return
        self.last_text = text
        self.err.flush()

    def say(self, text: str) -> None:
        self.clear()
        self.err.write(printable(text, None) + "\n")
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
    chain: list[dict[str, Any]] | None = None  # the compile/import jobs followed first
    source_commit: str | None = None  # the commit submit synced the clone to (decision 72)

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
            "tests": d.tests.to_json() if d.tests else None,
            "results": d.results,
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
            **({"chain": self.chain} if self.chain is not None else {}),
            **({"source_commit": self.source_commit} if self.source_commit else {}),
        }


def _hang(lines: list[LogLine]) -> bool:
    return any(
        k in (Kind.PROGRAM, Kind.SETUP) and HANG_TEXT in ln.text.lower()
        for k, ln in classify(lines)
    )


@dataclass
class Followed:
    """How following a job ended: the verdict and what watch itself did to the job."""

    decision: Decision
    cancelled: str | None  # "hang" / "timeout" when watch cancelled the job
    timed_out: bool
    elapsed: float


def watch_job(
    handle: JobHandle,
    spec: JobSpec,
    console: Console,
    *,
    timeout: float | None = None,
    keep_running: bool = False,
    poll: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Followed:
    """Follow `handle` to its end (or the deadline), streaming its logs to `console`."""
    lines: list[LogLine] = []

    def follow(final: bool = False) -> list[LogLine]:
        new: list[LogLine] = []
        for got, prefix in handle.logs(final):
            console.lines(got, prefix)
            new += got
        lines.extend(new)
        return new

    start = clock()
    deadline = start + timeout if timeout else None
    cancelled: str | None = None
    cancel_deadline = 0.0
    timed_out = False
    what = handle.what
    while True:
        ended = handle.refresh()
        new = follow()
        now = clock()
        if cancelled is None and not ended and _hang(new):
            console.say(f"[watch] {HANG_TEXT!r} in the log: {handle.stop_verb} {what}")
            handle.cancel()
            cancelled, cancel_deadline = "hang", now + CANCEL_WAIT
        if ended:
            break
        if deadline is not None and now >= deadline and cancelled is None:
            timed_out = True
            if keep_running:
                console.say(f"[watch] timeout after {timeout:g}s; {what} keeps running")
                break
            console.say(f"[watch] timeout after {timeout:g}s: {handle.stop_verb} {what}")
            handle.cancel()
            cancelled, cancel_deadline = "timeout", now + CANCEL_WAIT
        if cancelled is not None and now >= cancel_deadline:
            if handle.overdue():
                break
            cancel_deadline = now + CANCEL_WAIT
        console.progress(handle.progress(now - start, len(lines)))
        sleep(poll if cancelled is None else min(poll, handle.cancel_poll))
    follow(final=True)
    console.clear()
    decision, timed_out = final_decision(handle, lines, spec, timed_out, keep_running)
    return Followed(decision, cancelled, timed_out, clock() - start)


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
    refuse_ssh_host_off_remote(spec, ssh_host)
    sub = load_submission(work_dir)
    if sub is None:
        raise BuildError(
            "work_dir",
            f"{work_dir} has not been submitted (no submission.json)",
            "run `trtllm-script-builder submit WORK_DIR` first",
        )
    poll = max(poll, 0.05)
    handle = _handle(spec, sub, poll, ssh_host)
    chain = None
    if sub.prerequisites and isinstance(handle, SlurmJob):  # the compile/import first (decision 65)
        from trtllm_script_builder.process.chain import follow_chain

        chain = follow_chain(
            sub, handle, spec, console,
            follow=watch_job, timeout=timeout, keep_running=keep_running, poll=poll,
        )  # fmt: skip
    if chain is not None and chain.decision is not None and chain.handle is not None:
        done = Followed(chain.decision, chain.cancelled, chain.timed_out, chain.elapsed)
        fields = chain.handle.result_fields()
    else:
        left = timeout  # what the chain left of it
        if chain is not None and timeout is not None:
            left = max(timeout - chain.elapsed, 0.001)
        done = watch_job(handle, spec, console, timeout=left, keep_running=keep_running, poll=poll)
        fields = handle.result_fields()
        add_perf_sanity(done.decision, spec, getattr(handle, "read", read_local))
    result = WatchResult(
        done.decision,
        sub.scenario,
        sub.work_dir,
        cancelled=done.cancelled,
        timed_out=done.timed_out,
        elapsed=done.elapsed + (chain.elapsed if chain and chain.decision is None else 0),
        chain=chain.states if chain else None,
        source_commit=sub.source_commit,
        **fields,
    )
    write_json(work_dir / VERDICT_FILE, result.to_json())
    return result


def _handle(spec: JobSpec, sub: Submission, poll: float, ssh_host: str | None) -> JobHandle:
    if sub.pid is not None:
        if sub.host != socket.gethostname():
            raise BuildError(
                "work_dir",
                f"pid {sub.pid} was started on {sub.host}, not on this host",
                f"watch it on {sub.host}",
            )
        return LocalProcess(
            sub.pid,
            sub.pid_start,
            sub.rc_file,
            sub.log_file or "",
            sub.host,
            alloc_job_id=sub.alloc_job_id if sub.persistent else None,
            container_name=sub.container_name,
        )
    assert sub.job_id is not None
    runner: Runner
    if sub.scenario == "remote_slurm":
        host = ssh_host or sub.ssh_host or resolve_ssh_host(spec, None)
        ssh = SshRunner(SshTarget(host))
        runner, read = ssh, ssh.read_from
    else:
        host = sub.host
        runner, read = run, read_local
    array_logs = None
    if sub.array_job_id is not None:
        base = spec.remote_work_dir or spec.work_dir or sub.work_dir
        array_logs = LogNames(spec.log_file_pattern, spec.error_file_pattern, base)
    return SlurmJob(
        sub.job_id, runner, read, sub.log_file, sub.err_file, host, poll, array_logs=array_logs
    )


def render_verdict(result: WatchResult) -> str:
    d = result.decision
    who = f"job {result.job_id}" if result.job_id else f"pid {result.pid}"
    if result.job_id and result.pid:
        who = f"pid {result.pid} in allocation {result.job_id}"
    lines = [f"verdict: {d.verdict.value} ({who}: {d.reason})"]
    lines += [f"  {e}" for e in d.evidence]
    if t := d.tests:
        lines.append(
            f"tests: {t.passed} passed, {t.failed} failed, {t.errors} errors, {t.skipped} skipped"
            f" ({t.source})"
        )
    lines += result_lines(d.results)
    return "\n".join(printable(line, None) for line in lines) + "\n"


def verdict_json(result: WatchResult) -> str:
    return json.dumps(result.to_json(), separators=(",", ":"))
