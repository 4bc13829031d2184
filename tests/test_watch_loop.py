"""The one run loop (follow.follow) driven by a fake job handle that answers for itself, on a
fake clock: hang detection, the deadline, keep_running and an ignored cancel, without Slurm or
processes."""

from __future__ import annotations

import io
from typing import Any

from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.follow import CANCEL_WAIT, EachPoller, Loop, Tracked
from trtllm_script_builder.process.handles import Logs, read_local
from trtllm_script_builder.process.verdict import Decision, LogLine, Verdict
from trtllm_script_builder.process.watch import Console

from .conftest import job_spec

# The fake decides on its own; the loop only passes the spec on.
SPEC = job_spec()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeJob:
    """Prints `script[i]` on refresh i; ends by itself after `ends_after` refreshes, or
    `obeys_after` refreshes after a cancel (None: never)."""

    what = "job 7"
    stop_verb = "cancelling"
    cancel_poll = 1.0

    def __init__(
        self,
        script: list[list[str]],
        ends_after: int | None = None,
        obeys_after: int | None = 0,
    ) -> None:
        self.script, self.ends_after, self.obeys_after = script, ends_after, obeys_after
        self.refreshes = 0
        self.cancels: list[int] = []  # refresh count at each cancel
        self.overdues = 0
        self.pending: list[str] = []
        self.ended = False
        self.lineno = 0

    def refresh(self) -> bool:
        if self.refreshes < len(self.script):
            self.pending += self.script[self.refreshes]
        self.refreshes += 1
        if self.ends_after is not None and self.refreshes >= self.ends_after:
            self.ended = True
        if self.cancels and self.obeys_after is not None:
            self.ended |= self.refreshes - self.cancels[0] > self.obeys_after
        return self.ended

    def logs(self, final: bool = False) -> Logs:
        got = []
        for text in self.pending:
            self.lineno += 1
            got.append(LogLine(text, "job.out", self.lineno))
        self.pending = []
        return [(got, "")]

    def cancel(self) -> None:
        self.cancels.append(self.refreshes)

    def overdue(self) -> bool:
        self.overdues += 1
        return True

    def progress(self, elapsed: float, log_lines: int) -> str:
        return f"[watch] {self.what} RUNNING, {elapsed:.0f}s, {log_lines} log lines"

    def ended_on_its_own(self) -> bool:
        return not self.cancels

    def result_fields(self) -> dict[str, Any]:
        return {"job_id": "7"}

    def decide(self, lines: list[LogLine], spec: JobSpec, timed_out: bool) -> Decision:
        if timed_out:
            return Decision(Verdict.TIMEOUT, "timed out")
        if any("hang detected" in ln.text.lower() for ln in lines):
            return Decision(Verdict.HANG_DETECTED, "hang")
        return Decision(Verdict.PASSED, f"{len(lines)} lines")


def follow_one(job: FakeJob, **kw: Any) -> tuple[Any, Clock, str, str]:
    clock = Clock()
    out, err = io.StringIO(), io.StringIO()
    t = Tracked(job, SPEC, "local_docker", "/w", read_local)  # type: ignore[arg-type]
    Loop(
        [t],
        [],
        EachPoller(),
        Console(out, err),
        progress=lambda loop: job.progress(0, len(t.lines)),
        stream=True,
        poll=5.0,
        clock=clock,
        sleep=clock.sleep,
        **kw,
    ).run()
    return t.result, clock, out.getvalue(), err.getvalue()


def test_a_job_that_ends_is_followed_to_its_last_line() -> None:
    job = FakeJob([["step 1"], ["step 2"], ["1 passed"]], ends_after=3)
    done, clock, out, _ = follow_one(job)
    assert (done.decision.verdict, done.cancelled, done.timed_out) == (Verdict.PASSED, None, False)
    assert out.splitlines() == ["step 1", "step 2", "1 passed"]
    assert job.cancels == [] and clock.now == 1010.5  # two polls of 5 s, the last lines' wait


def test_hang_in_the_log_cancels_at_once() -> None:
    job = FakeJob([["working"], ["Hang detected: no progress"], [], []], obeys_after=1)
    done, clock, _, err = follow_one(job)
    assert (done.decision.verdict, done.cancelled) == (Verdict.HANG_DETECTED, "hang")
    assert job.cancels == [2]  # on the poll that saw the line, once
    assert "'hang detected' in the log: cancelling job 7" in err
    assert clock.now - 1000.0 < CANCEL_WAIT  # polled faster (cancel_poll) after the cancel


def test_hang_after_the_end_cancels_nothing() -> None:
    job = FakeJob([["Hang detected"]], ends_after=1)
    done, _, _, _ = follow_one(job)
    assert (done.cancelled, job.cancels) == (None, [])


def test_deadline_cancels_and_reports_a_timeout() -> None:
    job = FakeJob([["running"]], obeys_after=2)
    done, clock, _, err = follow_one(job, timeout=12)
    assert (done.decision.verdict, done.cancelled, done.timed_out) == (
        Verdict.TIMEOUT,
        "timeout",
        True,
    )
    assert job.cancels == [4]  # refreshes at 0, 5, 10 s; the one at 15 s is past 12 s
    assert "timeout after 12s: cancelling job 7" in err


def test_keep_running_leaves_the_job_alone() -> None:
    job = FakeJob([["running"]])
    done, _, _, err = follow_one(job, timeout=7, keep_running=True)
    assert (done.timed_out, done.cancelled, job.cancels) == (True, None, [])
    assert "job 7 keeps running" in err


def test_a_job_that_ends_on_its_own_after_the_cancel_is_not_a_timeout() -> None:
    job = FakeJob([["running"]], ends_after=3)
    job.ended_on_its_own = lambda: True  # type: ignore[method-assign]
    done, _, _, _ = follow_one(job, timeout=4)
    assert (done.cancelled, done.timed_out, done.decision.verdict) == (
        "timeout",
        False,
        Verdict.PASSED,
    )


class Stubborn(FakeJob):
    """Ignores cancels; gives up on the third overdue (a process handle presses with SIGKILL)."""

    def overdue(self) -> bool:
        self.overdues += 1
        return self.overdues >= 3


def test_an_ignored_cancel_is_pressed_then_given_up() -> None:
    job = Stubborn([["running"]], obeys_after=None)
    done, clock, _, _ = follow_one(job, timeout=1)
    assert job.overdues == 3 and len(job.cancels) == 1
    assert clock.now - 1000.0 >= 3 * CANCEL_WAIT  # another CANCEL_WAIT after each press
    assert done.cancelled == "timeout"
