"""`watch DIR` on a submitted build-many folder: one loop for all its jobs.

Every poll asks Slurm once about all jobs still open (one squeue call, one sacct call for
those that left the queue: slurm.query_many). A job that ends gets its verdict by the rules
of single-job watch (handles.SlurmJob.decide) and its `verdict.json`; `hang detected` in a
running job's log cancels that job. At the end the batch folder gets `results.json` (counts
per verdict, one row per job) and `junit.xml` (every pytest job's report, merged). On
remote_slurm the same calls go through one ssh connection, and a job's logs are read when it
ends, not at every poll.

`--timeout` cancels every job still queued or running (one scancel for all) unless
`keep_running`; an interrupt (Ctrl-C) asks `on_interrupt` whether to cancel them.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.batch_submit import (
    BatchJob,
    BatchSubmission,
    load_batch_submission,
)
from trtllm_script_builder.process.handles import (
    MAX_READ,
    LogNames,
    Reader,
    SlurmJob,
    junit_path,
    read_local,
)
from trtllm_script_builder.process.junit import JUnitError, parse_junit
from trtllm_script_builder.process.proc import Runner, run
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.ssh import SshRunner, SshTarget
from trtllm_script_builder.process.submission import write_json
from trtllm_script_builder.process.verdict import HANG_TEXT, LogLine, Verdict
from trtllm_script_builder.process.watch import (
    CANCEL_WAIT,
    VERDICT_FILE,
    Console,
    WatchResult,
    _hang,
)

RESULTS_FILE = "results.json"
JUNIT_FILE = "junit.xml"
SETTLE = 0.5  # seconds for the last log lines of a job that just ended


def batch_exit_status(verdicts: list[Verdict]) -> int:
    """0 when every job PASSED; when every job that did not pass has one verdict, that
    verdict's status; 1 when they differ (decision 68)."""
    bad = {v for v in verdicts if v is not Verdict.PASSED}
    if not bad:
        return 0
    if len(bad) == 1:
        return next(iter(bad)).exit_code
    return 1


@dataclass
class Tracked:
    job: BatchJob
    spec: JobSpec
    handle: SlurmJob
    lines: list[LogLine] = field(default_factory=list)
    cancelled: str | None = None  # "hang" / "timeout" / "interrupt" when watch cancelled it
    result: WatchResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None


@dataclass
class BatchResult:
    batch_dir: str
    jobs: list[WatchResult]
    entries: list[BatchJob]
    junit: str | None
    notes: list[str]
    timed_out: bool
    cancelled: str | None
    elapsed: float

    @property
    def exit_status(self) -> int:
        return batch_exit_status([r.verdict for r in self.jobs])

    def to_json(self) -> dict[str, Any]:
        counts = Counter(r.verdict.value for r in self.jobs)
        rows = []
        for entry, r in zip(self.entries, self.jobs, strict=True):
            d = r.decision
            tests = None
            if d.tests is not None:
                t = d.tests
                tests = {
                    "passed": t.passed,
                    "failed": t.failed,
                    "errors": t.errors,
                    "skipped": t.skipped,
                    "failing": [x.id for x in t.failing],
                }
            rows.append(
                {
                    "work_dir": r.work_dir,
                    "entry": entry.entry,
                    "job_id": r.job_id,
                    "array_task": entry.job_id if entry.array_job_id else None,
                    "verdict": r.verdict.value,
                    "exit_code": d.exit_code,
                    "tests": tests,
                    "reason": d.reason,
                }
            )
        return {
            "batch_dir": self.batch_dir,
            "summary": {
                "jobs": len(self.jobs),
                "verdicts": {v.value: counts[v.value] for v in Verdict if counts[v.value]},
                "exit_status": self.exit_status,
            },
            "junit": self.junit,
            "notes": self.notes,
            "timed_out": self.timed_out,
            "cancelled_by_watch": self.cancelled,
            "elapsed_seconds": round(self.elapsed, 1),
            "jobs": rows,
        }


def _track(
    batch: BatchSubmission, runner: Runner, read: Reader, poll: float, accounting: bool
) -> list[Tracked]:
    out = []
    for job in batch.jobs:
        work = Path(job.work_dir)
        spec = read_job_spec(work)
        base = spec.remote_work_dir or spec.work_dir or str(work)
        array_logs = None
        out_path = err_path = None
        if job.array_job_id is not None:
            array_logs = LogNames(spec.log_file_pattern, spec.error_file_pattern, base)
        else:
            out_path, err_path = LogNames(
                spec.log_file_pattern, spec.error_file_pattern, base
            ).paths(job.job_id)
        handle = SlurmJob(
            job.job_id,
            runner,
            read,
            out_path,
            err_path,
            batch.host,
            poll,
            accounting=accounting,
            array_logs=array_logs,
        )
        out.append(Tracked(job, spec, handle))
    return out


def _cancel(runner: Runner, open_jobs: list[Tracked]) -> None:
    """One scancel for every job still open (array tasks as `ARRAY_TASK`, pending or not)."""
    if not open_jobs:
        return
    ids = [t.handle.job_id for t in open_jobs]
    runner(["scancel", *ids])


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
    folder = folder.resolve()
    batch = load_batch_submission(folder)
    if batch is None:
        raise BuildError(
            "work_dir",
            f"{folder} has not been submitted as a batch (no batch_submission.json)",
            "run `trtllm-script-builder submit DIR` first",
        )
    poll = max(poll, 0.05)
    runner: Runner = run
    read: Reader = read_local
    remote = batch.scenario == "remote_slurm"
    if remote:
        host = ssh_host or batch.ssh_host or batch.host
        ssh = SshRunner(SshTarget(host))
        runner, read = ssh, ssh.read_from
    accounting = slurm.accounting_on(runner)
    tracked = _track(batch, runner, read, poll, accounting)
    start = clock()
    deadline = start + timeout if timeout else None
    cancelled: str | None = None
    cancel_deadline = 0.0
    timed_out = False

    def finish(t: Tracked, timed: bool) -> None:
        new = t.handle.logs(final=True)
        for got, _ in new:
            t.lines.extend(got)
        if timed and not keep_running and t.handle.ended_on_its_own():
            timed = False  # it ended on its own before the cancel landed
        decision = t.handle.decide(t.lines, t.spec, timed)
        t.result = WatchResult(
            decision,
            batch.scenario,
            t.job.work_dir,
            cancelled=t.cancelled,
            timed_out=timed,
            elapsed=clock() - start,
            **t.handle.result_fields(),
        )
        write_json(Path(t.job.work_dir) / VERDICT_FILE, t.result.to_json())
        who = t.job.entry or t.job.work_dir
        console.say(f"[watch] {decision.verdict.value}: {who} ({t.handle.what}: {decision.reason})")

    def cancel_open(why: str) -> None:
        nonlocal cancelled, cancel_deadline
        open_jobs = [t for t in tracked if not t.done]
        for t in open_jobs:
            t.cancelled = t.cancelled or why
        _cancel(runner, open_jobs)
        cancelled, cancel_deadline = why, clock() + CANCEL_WAIT

    while True:
        try:
            open_jobs = [t for t in tracked if not t.done]
            if not open_jobs:
                break
            statuses = slurm.query_many(runner, [t.handle.job_id for t in open_jobs], accounting)
            ended = []
            for t in open_jobs:
                if t.handle.update(statuses[t.handle.job_id], settle=False):
                    ended.append(t)
                    continue
                if remote:
                    continue  # over ssh the logs are read once, at the job's end
                new: list[LogLine] = []
                for got, _ in t.handle.logs():
                    new += got
                t.lines.extend(new)
                if t.cancelled is None and _hang(new):
                    console.say(f"[watch] {HANG_TEXT!r} in the log: cancelling {t.handle.what}")
                    t.handle.cancel()
                    t.cancelled = "hang"
            if ended:
                sleep(SETTLE)
                for t in ended:
                    finish(t, timed_out)
                continue  # ask again at once: the next ended job need not wait a poll
            now = clock()
            if deadline is not None and now >= deadline and not timed_out and cancelled is None:
                timed_out = True
                n = len(open_jobs)
                if keep_running:
                    console.say(f"[watch] timeout after {timeout:g}s; {n} job(s) keep running")
                    break
                console.say(f"[watch] timeout after {timeout:g}s: cancelling {n} job(s)")
                cancel_open("timeout")
            elif cancelled is not None and now >= cancel_deadline:
                break  # the cancel was not obeyed in time; the verdicts say what is left
            console.progress(_progress(tracked, statuses))
            sleep(poll if cancelled is None else min(poll, SlurmJob.cancel_poll))
        except KeyboardInterrupt:
            console.clear()
            open_count = len([t for t in tracked if not t.done])
            if cancelled is not None or on_interrupt is None or not on_interrupt(open_count):
                raise
            console.say(f"[watch] cancelling {open_count} job(s)")
            cancel_open("interrupt")
    for t in tracked:
        if not t.done:
            finish(t, timed_out)
    console.clear()
    results = [t.result for t in tracked if t.result is not None]
    junit, notes = merge_junit(folder, tracked, read)
    result = BatchResult(
        str(folder),
        results,
        [t.job for t in tracked],
        junit,
        notes,
        timed_out,
        cancelled,
        clock() - start,
    )
    write_json(folder / RESULTS_FILE, result.to_json())
    return result


def _progress(tracked: list[Tracked], statuses: dict[str, slurm.JobStatus]) -> str:
    done = [t for t in tracked if t.done]
    running = pending = 0
    for t in tracked:
        if t.done:
            continue
        state = (statuses.get(t.handle.job_id) or t.handle.st).state or ""
        if state.startswith("PENDING"):
            pending += 1
        else:
            running += 1
    passed = sum(1 for t in done if t.result and t.result.verdict is Verdict.PASSED)
    failed = sum(1 for t in done if t.result and t.result.verdict is Verdict.FAILED)
    other = len(done) - passed - failed
    return (
        f"[watch] {len(done)}/{len(tracked)} done, {running} running, {pending} pending, "
        f"{passed} passed, {failed} failed, {other} other"
    )


def merge_junit(
    folder: Path, tracked: list[Tracked], read: Reader = read_local
) -> tuple[str | None, list[str]]:
    """Every pytest job's JUnit report as one `<testsuites>` in folder/junit.xml, each suite
    named after its job's folder; (None, notes) when no job wrote one."""
    notes: list[str] = []
    suites: list[ET.Element] = []
    for t in tracked:
        own = t.handle.own_id
        path = junit_path(t.spec, own) if own else None
        if path is None:
            continue
        data = read(path, 0)
        if not data:
            continue
        if len(data) >= MAX_READ:
            notes.append(f"{path} not merged: larger than {MAX_READ} bytes")
            continue
        try:
            parse_junit(data, path)  # refuses a DTD and what is not a JUnit report
            root = ET.fromstring(data)
        except (JUnitError, ET.ParseError) as exc:
            notes.append(f"{path} not merged: {exc}")
            continue
        found = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        for suite in found:
            suite.set("name", Path(t.job.work_dir).name)
            suites.append(suite)
    if not suites:
        return None, notes
    merged = ET.Element("testsuites")
    for key in ("tests", "failures", "errors", "skipped"):
        merged.set(key, str(sum(int(_number(s.get(key))) for s in suites)))
    merged.set("time", f"{sum(_number(s.get('time')) for s in suites):.3f}")
    merged.extend(suites)
    out = folder / JUNIT_FILE
    from trtllm_script_builder.atomic import write_file

    body = ET.tostring(merged, encoding="unicode")
    write_file(out, '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n")
    return str(out), notes


def _number(text: str | None) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0


def render_results(result: BatchResult) -> str:
    """The batch's verdicts for a person: the counts, then one line per job that did not pass."""
    data = result.to_json()
    counts = ", ".join(f"{n} {v}" for v, n in data["summary"]["verdicts"].items())
    lines = [f"batch: {len(result.jobs)} job(s): {counts or 'none'}"]
    for row in data["jobs"]:
        if row["verdict"] != Verdict.PASSED.value:
            lines.append(f"  {row['verdict']}: {row['entry'] or row['work_dir']} ({row['reason']})")
            failing = (row["tests"] or {}).get("failing") or []
            lines += [f"    failed {t}" for t in failing]
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"results: {result.batch_dir}/{RESULTS_FILE}")
    if result.junit:
        lines.append(f"junit: {result.junit}")
    return "\n".join(lines) + "\n"
