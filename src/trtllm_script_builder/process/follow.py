"""The one run loop: follow a set of submitted jobs (one job is a set of one) to their ends.

Every poll asks the backend once about every job still open (`Poller.poll`: for Slurm one
squeue call and at most one sacct call, whatever the number of jobs; a local process answers
for itself). A job that ends gets its verdict (`final_decision`, one path for every job) and
`on_done` hears of it. `hang detected` in a running job's log cancels that job; `--timeout`
cancels every open job (one call for all) unless `keep_running`; a cancel not obeyed within
CANCEL_WAIT is pressed (a process gets SIGKILL) or given up, and the job is decided as it
stands. An interrupt (Ctrl-C) asks `on_interrupt` whether to cancel the open jobs.

The prerequisites (the import and compile jobs a test job waits for,
decisions compile-chain and batch-prerequisites) are followed in the same loop and the same query. A
test job gets no verdict of its own before its prerequisites have theirs; when one of them did not
succeed, every job waiting for it gets that prerequisite's verdict (a failed compile:
COMPILE_FAILED) instead of the CANCELLED Slurm gives it, and whatever no open job needs any more is
cancelled (and waited for: the loop ends when nothing it cancelled still runs). A prerequisite
marked `shared` belongs to a batch the followed job is part of: a timeout leaves it running for the
batch's other jobs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.handles import JobHandle, Reader, final_decision
from trtllm_script_builder.process.perf_sanity import add_perf_sanity
from trtllm_script_builder.process.proc import time_left
from trtllm_script_builder.process.verdict import (
    HANG_TEXT,
    MAX_EVIDENCE,
    Decision,
    Kind,
    LogLine,
    Verdict,
    classify,
)

CANCEL_WAIT = 60.0  # seconds to wait for a cancelled job to end
# After --timeout: seconds the tools get to answer the poll under way, cancel the jobs, wait for
# them (CANCEL_WAIT) and read how they ended, however long each would take (decision
# timeout-bounds-wall-time).
AFTER_TIMEOUT = CANCEL_WAIT + 30.0
SETTLE = 0.5  # seconds for the last log lines of a job that just ended


class Poller(Protocol):
    """How a backend asks about its jobs: a fixed number of calls per poll for all of them."""

    cancel_poll: float  # longest sleep between polls while a cancel is pending

    def poll(self, handles: Sequence[Any]) -> list[bool]:
        """Refresh every handle; True for each one whose job has ended."""
        ...

    def cancel(self, handles: Sequence[Any]) -> None:
        """Cancel these jobs (one call where the backend allows it)."""
        ...


class EachPoller:
    """Handles that answer for themselves (a local process: its pid and exit-status file)."""

    cancel_poll = 0.5

    def poll(self, handles: Sequence[Any]) -> list[bool]:
        return [h.refresh() for h in handles]

    def cancel(self, handles: Sequence[Any]) -> None:
        for h in handles:
            h.cancel()


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
    # the commit submit synced the clone to (decision source-commit-check)
    source_commit: str | None = None

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


@dataclass
class Tracked:
    """A job followed for its own verdict (a test job, or a Docker run)."""

    handle: JobHandle
    spec: JobSpec
    scenario: str
    work_dir: str
    read: Reader  # where its files are read (the perf-sanity figures)
    entry: str = ""  # a batch's name for it
    source_commit: str | None = None
    lines: list[LogLine] = field(default_factory=list)
    cancelled: str | None = None  # "hang" / "timeout" / "interrupt" when watch cancelled it
    cancel_deadline: float | None = None  # when a cancel not obeyed is pressed or given up
    result: WatchResult | None = None
    after: list[Prerequisite] = field(default_factory=list)  # what it waits for, in order
    parked: bool = False  # ended while a prerequisite had no verdict yet: that one decides
    shown: str = ""  # how the verdict names the job: the job that ran, or the id it never ran as

    @property
    def done(self) -> bool:
        return self.result is not None


@dataclass
class Prerequisite:
    """An import or compile job, shared by the test jobs in `users`."""

    kind: str
    job_id: str
    handle: Any  # chain.PrerequisiteJob
    shared: bool = False  # a batch's: a single job's timeout leaves it running
    lines: list[LogLine] = field(default_factory=list)
    cancelled: str | None = None
    decision: Decision | None = None
    users: list[Tracked] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.decision is not None

    def state(self) -> dict[str, Any]:
        """verdict.json's `chain` entry."""
        d = self.decision
        return {
            "kind": self.kind,
            "job_id": self.job_id,
            "state": d.state if d else None,
            "verdict": d.verdict.value if d else None,
        }

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "kind": self.kind,
            "job_id": self.job_id,
            "state": d.state if d else self.handle.st.state,
            "verdict": d.verdict.value if d else None,
            "reason": d.reason if d else None,
            "evidence": d.evidence if d else [],
            "cancelled_by_watch": self.cancelled,  # "chain": no job needed it any more
            "log_files": [p for p in (self.handle.out_path, self.handle.err_path) if p],
        }


def link(tracked: Tracked, prereq: Prerequisite) -> None:
    tracked.after.append(prereq)
    prereq.users.append(tracked)


def hang(lines: list[LogLine]) -> bool:
    return any(
        k in (Kind.PROGRAM, Kind.SETUP) and HANG_TEXT in ln.text.lower()
        for k, ln in classify(lines)
    )


@dataclass
class Followed:
    """What a backend gives the run loop for one submitted job."""

    handle: JobHandle
    poller: Poller
    host: Any  # process.host.Host: where its files are read
    prereqs: list[Prerequisite]


@dataclass
class Outcome:
    timed_out: bool
    cancelled: str | None
    elapsed: float


def _chain_states(t: Tracked, failed: bool) -> list[dict[str, Any]] | None:
    if not t.after:
        return None
    states = [p.state() for p in t.after]
    if failed:
        states.append({"kind": "test", "job_id": _job_id(t.handle), "state": None, "verdict": None})
    return states


def _job_id(handle: Any) -> str:
    """The id a job was submitted as (an array task's `ARRAY_TASK`)."""
    return str(getattr(handle, "job_id", ""))


@dataclass
class Loop:
    """One follow of `tracked` and the `prereqs` they wait for to their ends or the deadline
    (see the module's text): `Loop(...).run()`. `stream`: show each new log line;
    `logs_each_poll`: read the running jobs' logs at every poll (else at their ends)."""

    tracked: list[Tracked]
    prereqs: list[Prerequisite]
    poller: Poller
    console: Any
    progress: Callable[[Loop], str]
    on_done: Callable[[Tracked], None] = lambda _: None
    stream: bool = False
    logs_each_poll: bool = True
    timeout: float | None = None
    keep_running: bool = False
    poll: float = 5.0
    on_interrupt: Callable[[int], bool] | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.start = self.clock()
        self.chain_deadline = 0.0
        self.timed_out = False

    # ------------------------------------------------------------ reading logs

    def read_logs(
        self, handle: JobHandle, into: list[LogLine], final: bool = False
    ) -> list[LogLine]:
        new: list[LogLine] = []
        for got, prefix in handle.logs(final):
            if self.stream:
                self.console.lines(got, prefix)
            new += got
        into.extend(new)
        return new

    # ------------------------------------------------------------ verdicts

    def finish(self, t: Tracked, timed: bool) -> None:
        t.parked = False
        self.read_logs(t.handle, t.lines, final=True)
        decision, timed = final_decision(t.handle, t.lines, t.spec, timed, self.keep_running)
        add_perf_sanity(decision, t.spec, t.read)
        t.result = WatchResult(
            decision,
            t.scenario,
            t.work_dir,
            cancelled=t.cancelled,
            timed_out=timed,
            elapsed=self.clock() - self.start,
            chain=_chain_states(t, False),
            source_commit=t.source_commit,
            **t.handle.result_fields(),
        )
        t.shown = t.handle.what
        self.on_done(t)

    def finish_prerequisite(self, p: Prerequisite, timed: bool, running: bool = False) -> list[Any]:
        """Decide `p` (`running`: left running on purpose, judged as it stands); when it did
        not succeed, its verdict goes to every job waiting for it. Returns the handles to
        cancel: those jobs, and prerequisites no open job needs."""
        self.read_logs(p.handle, p.lines, final=True)
        keep = self.keep_running or running
        d, timed = final_decision(p.handle, p.lines, p.users[0].spec, timed, keep)
        p.decision = d
        self.console.say(f"[watch] {p.handle.what} {d.verdict.value} ({d.reason})")
        if d.verdict is Verdict.PASSED:
            return []
        stop: list[Any] = []
        left = timed and self.keep_running  # nothing is cancelled: the jobs keep their places
        for t in p.users:
            if t.done:
                continue
            evidence = d.evidence
            if not left:
                if not t.parked and t.cancelled is None:  # still queued: Slurm kept it
                    stop.append(t.handle)
                note = f"test job {_job_id(t.handle)} cancelled before it started"
                evidence = [*d.evidence[: MAX_EVIDENCE - 1], note]
            t.parked = False
            t.result = WatchResult(
                dataclasses.replace(d, evidence=evidence),
                t.scenario,
                t.work_dir,
                cancelled=t.cancelled or p.cancelled,
                timed_out=timed,
                elapsed=self.clock() - self.start,
                chain=_chain_states(t, True),
                source_commit=t.source_commit,
                **p.handle.result_fields(),
            )
            t.shown = f"job {_job_id(t.handle)}"  # the id it was submitted as: it never ran
            self.on_done(t)
        for q in self.prereqs:  # nobody waits for it any more
            if left or q.done or q.cancelled is not None:
                continue
            if all(u.done for u in q.users):
                q.cancelled = "chain"
                stop.append(q.handle)
        return stop

    # ------------------------------------------------------------ cancelling

    def open_jobs(self) -> list[Tracked]:
        return [t for t in self.tracked if not t.done and not t.parked]

    def open_prereqs(self) -> list[Prerequisite]:
        return [p for p in self.prereqs if not p.done]

    def named(self, handles: Sequence[Any]) -> str:
        return handles[0].what if len(handles) == 1 else f"{len(handles)} job(s)"

    def cancel_open(self, why: str, timed: bool) -> None:
        """Cancel every open job with one call; a shared prerequisite keeps running and is
        decided as it stands (its users with it)."""
        now = self.clock()
        stop: list[Any] = []
        for p in self.open_prereqs():
            if p.shared:
                continue
            p.cancelled = p.cancelled or why
            stop.append(p.handle)
        for t in self.open_jobs():
            t.cancelled = t.cancelled or why
            t.cancel_deadline = now + CANCEL_WAIT
            stop.append(t.handle)
        if stop:
            self.poller.cancel(stop)
        for p in self.open_prereqs():
            if p.shared:
                self.console.say(
                    f"[watch] the {p.handle.what} is the batch's, so it keeps running: "
                    "`watch DIR` of the batch cancels it"
                )
                self.finish_prerequisite(p, timed, running=True)
        self.chain_deadline = now + CANCEL_WAIT

    def give_up(self, now: float) -> None:
        """Cancels not obeyed in time: pressed harder, or the job decided as it stands (a
        prerequisite first, so that its users get its verdict)."""
        if self.chain_deadline and now >= self.chain_deadline:
            for p in self.open_prereqs():
                if p.cancelled is not None and any(not u.done for u in p.users):
                    self.finish_prerequisite(p, self.timed_out)
        late = [t for t in self.open_jobs() if t.cancel_deadline and now >= t.cancel_deadline]
        for t in late:
            if t.handle.overdue():
                self.finish(t, self.timed_out)
            else:
                t.cancel_deadline = now + CANCEL_WAIT
        self.settle_parked()

    def settle_parked(self) -> None:
        for t in self.tracked:  # every prerequisite it waits for has its verdict
            if t.parked and all(p.done for p in t.after):
                self.finish(t, self.timed_out)

    # ------------------------------------------------------------ the loop

    def waiting_over(self) -> bool:
        """Every job has its verdict, and nothing the loop cancelled still runs (a
        prerequisite cancelled as unneeded is waited for at most CANCEL_WAIT)."""
        if not all(t.done for t in self.tracked):
            return False
        waiting = [p for p in self.open_prereqs() if p.cancelled is not None and not p.shared]
        return not waiting or self.clock() >= self.chain_deadline

    def out_of_time(self) -> bool:
        """The time after --timeout is used up: what is still open is decided as it stands."""
        left = time_left()
        return self.timed_out and left is not None and left <= 0

    def run(self) -> Outcome:
        timeout, poll, on_interrupt = self.timeout, max(self.poll, 0.05), self.on_interrupt
        deadline = self.start + timeout if timeout else None
        cancelled: str | None = None
        while True:
            try:
                if self.waiting_over():
                    break
                if self.out_of_time():
                    handles = [p.handle for p in self.open_prereqs()]
                    handles += [t.handle for t in self.open_jobs()]
                    self.console.say(
                        f"[watch] no answer within {AFTER_TIMEOUT:g}s after the timeout: "
                        f"{self.named(handles)} may still be running"
                    )
                    break
                open_jobs, open_prereqs = self.open_jobs(), self.open_prereqs()
                handles = [p.handle for p in open_prereqs] + [t.handle for t in open_jobs]
                ended = dict(zip(map(id, handles), self.poller.poll(handles), strict=True))
                ended_prereqs = []
                for p in open_prereqs:
                    if ended[id(p.handle)]:
                        ended_prereqs.append(p)
                    elif self.logs_each_poll or p.kind == "compile":  # the compile's progress
                        self.read_logs(p.handle, p.lines)
                ended_jobs = []
                for t in open_jobs:
                    if ended[id(t.handle)]:
                        ended_jobs.append(t)
                    elif self.logs_each_poll:
                        new = self.read_logs(t.handle, t.lines)
                        if t.cancelled is None and hang(new):
                            what = f"{t.handle.stop_verb} {t.handle.what}"
                            self.console.say(f"[watch] {HANG_TEXT!r} in the log: {what}")
                            self.poller.cancel([t.handle])
                            t.cancelled, t.cancel_deadline = "hang", self.clock() + CANCEL_WAIT
                if ended_jobs or ended_prereqs:
                    self.sleep(SETTLE)
                    for t in ended_jobs:  # decided below unless a prerequisite decides for it
                        t.parked = True
                    stop: list[Any] = []
                    for p in ended_prereqs:  # in submission order: the import, then the compile
                        stop += self.finish_prerequisite(p, self.timed_out)
                    self.settle_parked()
                    if stop:
                        self.poller.cancel(stop)
                        self.chain_deadline = self.clock() + CANCEL_WAIT
                    continue  # ask again at once: the next ended job need not wait a poll
                now = self.clock()
                if deadline is not None and now >= deadline and not self.timed_out:
                    self.timed_out = True
                    handles = [p.handle for p in open_prereqs] + [t.handle for t in open_jobs]
                    if self.keep_running:
                        what = self.named(handles)
                        verb = "keeps" if len(handles) == 1 else "keep"
                        self.console.say(
                            f"[watch] timeout after {timeout:g}s; {what} {verb} running"
                        )
                        break
                    verb = handles[0].stop_verb if handles else "cancelling"
                    self.console.say(
                        f"[watch] timeout after {timeout:g}s: {verb} {self.named(handles)}"
                    )
                    cancelled = cancelled or "timeout"
                    self.cancel_open("timeout", True)
                self.give_up(now)
                self.console.progress(self.progress(self))
                pressing = any(t.cancel_deadline for t in self.open_jobs())
                nap = poll if not pressing else min(poll, self.poller.cancel_poll)
                if deadline is not None and not self.timed_out:
                    nap = min(nap, max(deadline - now, 0.05))  # --timeout is kept to the poll
                self.sleep(nap)
            except KeyboardInterrupt:
                self.console.clear()
                n = len(self.open_jobs()) + len(self.open_prereqs())
                if cancelled is not None or on_interrupt is None or not on_interrupt(n):
                    raise
                self.console.say(f"[watch] cancelling {n} job(s)")
                cancelled = "interrupt"
                self.cancel_open("interrupt", self.timed_out)
        for p in self.prereqs:  # what the loop left open: decided as it stands (its users first)
            if not p.done and any(not t.done for t in p.users):
                self.finish_prerequisite(p, self.timed_out)
        for t in self.tracked:
            if not t.done:
                self.finish(t, self.timed_out)
        self.console.clear()
        return Outcome(self.timed_out, cancelled, self.clock() - self.start)
