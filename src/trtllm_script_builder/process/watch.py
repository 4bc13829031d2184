"""`watch`: follow a submitted job, or every job of a submitted build-many folder, to its end
with the one run loop (follow.py), stream a single job's log, and give one verdict per job.

A single job is a run of one: its prerequisites (decision compile-chain) are followed in the same
loop, their lines marked `[compile]` / `[import]`. A batch gets each job's `verdict.json`, then
`results.json` and a merged `junit.xml` (batch_results.py); on a remote cluster a batch job's
logs are read when it ends, not at every poll (the compile's log excepted: its progress).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process import follow
from trtllm_script_builder.process import host as hosts
from trtllm_script_builder.process.batch_results import (
    RESULTS_FILE,
    BatchResult,
    merge_junit,
    progress,
)
from trtllm_script_builder.process.chain import ChainJob, PrerequisiteJob
from trtllm_script_builder.process.figures import result_lines
from trtllm_script_builder.process.follow import (
    CANCEL_WAIT,
    Loop,
    Prerequisite,
    Tracked,
    WatchResult,
    link,
)
from trtllm_script_builder.process.handles import LogNames, SlurmJob, SlurmPoller
from trtllm_script_builder.process.proc import time_box
from trtllm_script_builder.process.slurm_submit import BatchSubmission, load_batch_submission
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.submission import load_submission, write_json
from trtllm_script_builder.process.verdict import LogLine

__all__ = ["CANCEL_WAIT", "Console", "WatchResult", "watch", "watch_batch"]

VERDICT_FILE = "verdict.json"
# The verdicts quote the job's log: readable by their owner only, as a work_dir may be shared
# (decision shared-work-dir).
PRIVATE = 0o600
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
            # the job's own words: shown, never acted on by the terminal
            # (decision shown-never-obeyed)
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


def _one_progress(loop: Loop) -> str:
    """A single job's progress line: the prerequisite it waits for, else its own."""
    waiting = loop.open_prereqs()
    if waiting:
        p = waiting[0]
        return p.handle.progress(loop.clock() - loop.start, len(p.lines))
    t = loop.tracked[0]
    return t.handle.progress(loop.clock() - loop.start, len(t.lines))


def watch(
    work_dir: Path,
    *,
    timeout: float | None = None,
    keep_running: bool = False,
    poll: float = 5.0,
    ssh_host: str | None = None,
    console: Console | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WatchResult:
    """Follow the job submitted from work_dir to its end (or the deadline)."""
    with time_box(timeout and timeout + follow.AFTER_TIMEOUT):  # a tool that never answers too
        return _watch(work_dir, timeout, keep_running, poll, ssh_host, console, clock, sleep)


def _watch(
    work_dir: Path,
    timeout: float | None,
    keep_running: bool,
    poll: float,
    ssh_host: str | None,
    console: Console | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> WatchResult:
    work_dir = work_dir.resolve()
    console = console or Console(sys.stdout, sys.stderr)
    spec = read_job_spec(work_dir)
    from trtllm_script_builder.resolve.backend import backend_of

    backend = backend_of(spec.execution_scenario)
    backend.refuse_options(spec, ssh_host=ssh_host)
    sub = load_submission(work_dir)
    if sub is None:
        raise BuildError(
            "work_dir",
            f"{work_dir} has not been submitted (no submission.json)",
            "run `trtllm-script-builder submit WORK_DIR` first",
        )
    # a record others may have written is followed, never acted on (decision
    # records-acted-on-are-own): its jobs are left running at the timeout
    keep_running = keep_running or sub.foreign is not None
    parts = backend.followed(spec, sub, ssh_host)
    prereqs = parts.prereqs
    tracked = Tracked(
        parts.handle,
        spec,
        sub.scenario,
        sub.work_dir,
        parts.host.read_from,
        source_commit=sub.source_commit,
    )
    for p in prereqs:
        link(tracked, p)
    Loop(
        [tracked],
        prereqs,
        parts.poller,
        console,
        progress=_one_progress,
        stream=True,
        timeout=timeout,
        keep_running=keep_running,
        poll=poll,
        clock=clock,
        sleep=sleep,
    ).run()
    assert tracked.result is not None
    write_json(work_dir / VERDICT_FILE, tracked.result.to_json(), PRIVATE)
    return tracked.result


def watch_batch(
    folder: Path,
    *,
    timeout: float | None = None,
    keep_running: bool = False,
    poll: float = 5.0,
    console: Console,
    on_interrupt: Callable[[int], bool] | None = None,
    ssh_host: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> BatchResult:
    """Follow every job of the submitted build-many folder to its end (or the deadline)."""
    with time_box(timeout and timeout + follow.AFTER_TIMEOUT):  # a tool that never answers too
        return _watch_batch(
            folder, timeout, keep_running, poll, console, on_interrupt, ssh_host, clock, sleep
        )


def _watch_batch(
    folder: Path,
    timeout: float | None,
    keep_running: bool,
    poll: float,
    console: Console,
    on_interrupt: Callable[[int], bool] | None,
    ssh_host: str | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> BatchResult:
    folder = folder.resolve()
    batch = load_batch_submission(folder)
    if batch is None:
        raise BuildError(
            "work_dir",
            f"{folder} has not been submitted as a batch (no batch_submission.json)",
            "run `trtllm-script-builder submit DIR` first",
        )
    keep_running = keep_running or batch.foreign is not None  # decision records-acted-on-are-own
    if ssh_host and batch.ssh_host is None:  # its jobs run on this machine's cluster
        raise BuildError("ssh_host", f"the batch is {batch.scenario}", "drop --ssh-host")
    on = hosts.host_for(ssh_host or batch.ssh_host)
    tracked: list[Tracked] = []
    for job in batch.jobs:
        spec = read_job_spec(Path(job.work_dir))
        base = spec.remote_work_dir or spec.work_dir or job.work_dir
        names = LogNames(spec.log_file_pattern, spec.error_file_pattern, base)
        out = err = None
        if job.array_job_id is None:
            out, err = names.paths(job.job_id)
        handle = SlurmJob(
            job.job_id,
            on,
            on.read_from,
            out,
            err,
            batch.host,
            array_logs=names if job.array_job_id is not None else None,
        )
        tracked.append(
            Tracked(
                handle,
                spec,
                batch.scenario,
                job.work_dir,
                on.read_from,
                entry=job.entry,
                source_commit=job.source_commit,
            )
        )
    prereqs = _prerequisites(batch, tracked, on)

    def done(t: Tracked) -> None:
        assert t.result is not None
        write_json(Path(t.work_dir) / VERDICT_FILE, t.result.to_json(), PRIVATE)
        d = t.result.decision
        console.say(f"[watch] {d.verdict.value}: {t.entry or t.work_dir} ({t.shown}: {d.reason})")

    outcome = Loop(
        tracked,
        prereqs,
        SlurmPoller(on),
        console,
        progress=progress,
        on_done=done,
        logs_each_poll=not on.remote,
        timeout=timeout,
        keep_running=keep_running,
        poll=poll,
        on_interrupt=on_interrupt,
        clock=clock,
        sleep=sleep,
    ).run()
    results = [t.result for t in tracked if t.result is not None]
    junit, notes = merge_junit(folder, tracked, on.read_from)
    result = BatchResult(
        str(folder),
        results,
        list(batch.jobs),
        junit,
        notes,
        outcome.timed_out,
        outcome.cancelled,
        outcome.elapsed,
        [p.to_json() for p in prereqs],
    )
    write_json(folder / RESULTS_FILE, result.to_json(), PRIVATE)
    return result


def _prerequisites(
    batch: BatchSubmission, tracked: list[Tracked], on: hosts.Host
) -> list[Prerequisite]:
    """The batch's prerequisites, each linked both ways with the test jobs that wait for it."""
    by_id: dict[str, Prerequisite] = {}
    for data in batch.prerequisites or []:
        pre = ChainJob.from_json(data)
        handle = PrerequisiteJob(pre, on, on.read_from, batch.host)
        by_id[pre.job_id] = Prerequisite(pre.kind, pre.job_id, handle)
    for t, job in zip(tracked, batch.jobs, strict=True):
        for job_id in job.prerequisites or []:
            p = by_id.get(job_id)
            if p is None:
                raise BuildError(
                    "work_dir",
                    f"{job.work_dir} waits for job {job_id}, which batch_submission.json "
                    "does not list",
                    "submit the batch again with --force",
                )
            link(t, p)
    return [p for p in by_id.values() if p.users]  # one no job waits for is not followed


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
