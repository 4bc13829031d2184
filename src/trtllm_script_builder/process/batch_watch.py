"""`watch DIR` on a submitted build-many folder: one loop for all its jobs.

Every poll asks Slurm once about all jobs still open (one squeue call, one sacct call for
those that left the queue: slurm.query_many). A job that ends gets its verdict by the rules
of single-job watch (handles.SlurmJob.decide) and its `verdict.json`; `hang detected` in a
running job's log cancels that job. At the end the batch folder gets `results.json` (counts
per verdict, one row per job) and `junit.xml` (every pytest job's report, merged). On
remote_slurm the same calls go through one ssh connection, and a job's logs are read when it
ends, not at every poll (the compile's log excepted: its progress is read as it grows).

The batch's prerequisites (the import and compile jobs `submit` started once for all,
decisions 65, 71) are followed in the same loop and the same query: the progress line shows the
compile's `built NN%`. A test job gets no verdict of its own before its prerequisites have
theirs; when one of them did not succeed, every job waiting for it gets that prerequisite's
verdict (a failed compile: COMPILE_FAILED with the first compiler error) instead of the
CANCELLED Slurm gives it, and whatever no open job needs any more is cancelled (and waited for,
as a cancelled single job is: watch ends when nothing the batch started still runs).

`--timeout` cancels every job still queued or running (one scancel for all, prerequisites
included) unless `keep_running`; an interrupt (Ctrl-C) asks `on_interrupt` whether to cancel
them.
"""

from __future__ import annotations

import dataclasses
import math
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process import slurm
from trtllm_script_builder.process.batch_submit import (
    BatchJob,
    BatchSubmission,
    load_batch_submission,
)
from trtllm_script_builder.process.chain import ChainJob, PrerequisiteJob
from trtllm_script_builder.process.handles import (
    MAX_READ,
    LogNames,
    Reader,
    SlurmJob,
    final_decision,
    junit_path,
    read_local,
)
from trtllm_script_builder.process.junit import JUnitError, junit_root
from trtllm_script_builder.process.proc import Runner, run
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.ssh import SshRunner, SshTarget
from trtllm_script_builder.process.submission import write_json
from trtllm_script_builder.process.verdict import (
    HANG_TEXT,
    MAX_EVIDENCE,
    Decision,
    LogLine,
    Verdict,
)
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
    after: list[Prerequisite] = field(default_factory=list)  # what it waits for, in order
    parked: bool = False  # ended while a prerequisite had no verdict yet: that one decides

    @property
    def done(self) -> bool:
        return self.result is not None


@dataclass
class Prerequisite:
    """An import or compile job of the batch, shared by the test jobs in `users`."""

    job: ChainJob
    handle: PrerequisiteJob
    lines: list[LogLine] = field(default_factory=list)
    cancelled: str | None = None
    decision: Decision | None = None
    users: list[Tracked] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.decision is not None

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "kind": self.job.kind,
            "job_id": self.job.job_id,
            "state": d.state if d else self.handle.st.state,
            "verdict": d.verdict.value if d else None,
            "reason": d.reason if d else None,
            "evidence": d.evidence if d else [],
            "cancelled_by_watch": self.cancelled,  # "chain": no job needed it any more
            "log_files": [p for p in (self.handle.out_path, self.handle.err_path) if p],
        }


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
    prerequisites: list[dict[str, Any]] = field(default_factory=list)

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
                    "evidence": d.evidence,
                    "source_commit": r.source_commit,
                }
            )
        chain = {"prerequisites": self.prerequisites} if self.prerequisites else {}
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
            **chain,
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
        names = LogNames(spec.log_file_pattern, spec.error_file_pattern, base)
        array_logs = None
        out_path = err_path = None
        if job.array_job_id is not None:
            array_logs = names
        else:
            out_path, err_path = names.paths(job.job_id)
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


def _track_prerequisites(
    batch: BatchSubmission,
    tracked: list[Tracked],
    runner: Runner,
    read: Reader,
    poll: float,
    accounting: bool,
) -> list[Prerequisite]:
    """The batch's prerequisites, each linked both ways with the test jobs that wait for it."""
    by_id: dict[str, Prerequisite] = {}
    for data in batch.prerequisites or []:
        job = ChainJob.from_json(data)
        handle = PrerequisiteJob(job, runner, read, batch.host, poll, accounting=accounting)
        by_id[job.job_id] = Prerequisite(job, handle)
    for t in tracked:
        for job_id in t.job.prerequisites or []:
            p = by_id.get(job_id)
            if p is None:
                raise BuildError(
                    "work_dir",
                    f"{t.job.work_dir} waits for job {job_id}, which batch_submission.json "
                    "does not list",
                    "submit the batch again with --force",
                )
            t.after.append(p)
            p.users.append(t)
    return [p for p in by_id.values() if p.users]  # one no job waits for is not followed


def _chain_states(t: Tracked, failed: bool) -> list[dict[str, Any]]:
    """verdict.json's `chain`, as single-job watch writes it."""
    states: list[dict[str, Any]] = [
        {
            "kind": p.job.kind,
            "job_id": p.job.job_id,
            "state": p.decision.state if p.decision else None,
            "verdict": p.decision.verdict.value if p.decision else None,
        }
        for p in t.after
    ]
    if failed:
        states.append({"kind": "test", "job_id": t.handle.job_id, "state": None, "verdict": None})
    return states


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
    prereqs = _track_prerequisites(batch, tracked, runner, read, poll, accounting)
    start = clock()
    deadline = start + timeout if timeout else None
    cancelled: str | None = None
    cancel_deadline = chain_deadline = 0.0
    timed_out = False

    def finish(t: Tracked, timed: bool) -> None:
        t.parked = False
        new = t.handle.logs(final=True)
        for got, _ in new:
            t.lines.extend(got)
        decision, timed = final_decision(t.handle, t.lines, t.spec, timed, keep_running)
        t.result = WatchResult(
            decision,
            batch.scenario,
            t.job.work_dir,
            cancelled=t.cancelled,
            timed_out=timed,
            elapsed=clock() - start,
            chain=_chain_states(t, False) if t.after else None,
            source_commit=t.job.source_commit,
            **t.handle.result_fields(),
        )
        done_line(t, t.handle.what)

    def done_line(t: Tracked, what: str) -> None:
        assert t.result is not None
        write_json(Path(t.job.work_dir) / VERDICT_FILE, t.result.to_json())
        who = t.job.entry or t.job.work_dir
        d = t.result.decision
        console.say(f"[watch] {d.verdict.value}: {who} ({what}: {d.reason})")

    def finish_prerequisite(p: Prerequisite, timed: bool) -> list[str]:
        """Decide `p`; when it did not succeed, its verdict goes to every job waiting for
        it. Returns the ids to cancel: those jobs, and prerequisites no open job needs."""
        for got, _ in p.handle.logs(final=True):
            p.lines.extend(got)
        d, timed = final_decision(p.handle, p.lines, p.users[0].spec, timed, keep_running)
        p.decision = d
        console.say(f"[watch] {p.handle.what} {d.verdict.value} ({d.reason})")
        if d.verdict is Verdict.PASSED:
            return []
        stop: list[str] = []
        left = timed and keep_running  # nothing is cancelled: the jobs keep their places
        for t in p.users:
            if t.done:
                continue
            evidence = d.evidence
            if not left:
                if not t.parked and t.cancelled is None:  # still queued: Slurm kept it
                    stop.append(t.handle.job_id)
                note = f"test job {t.handle.job_id} cancelled before it started"
                evidence = [*d.evidence[: MAX_EVIDENCE - 1], note]
            t.parked = False
            t.result = WatchResult(
                dataclasses.replace(d, evidence=evidence),
                batch.scenario,
                t.job.work_dir,
                cancelled=t.cancelled or p.cancelled,
                timed_out=timed,
                elapsed=clock() - start,
                chain=_chain_states(t, True),
                source_commit=t.job.source_commit,
                **p.handle.result_fields(),
            )
            done_line(t, f"job {t.handle.job_id}")  # the id it was submitted as: it never ran
        for q in prereqs:  # nobody waits for it any more
            if left or q.done or q.cancelled is not None:
                continue
            if all(u.done for u in q.users):
                q.cancelled = "chain"
                stop.append(q.job.job_id)
        return stop

    def cancel_open(why: str) -> None:
        nonlocal cancelled, cancel_deadline
        open_jobs = [t for t in tracked if not t.done and not t.parked]
        for t in open_jobs:
            t.cancelled = t.cancelled or why
        open_prereqs = [p for p in prereqs if not p.done]
        for p in open_prereqs:
            p.cancelled = p.cancelled or why
        # one scancel for all (array tasks as `ARRAY_TASK`, pending or not)
        ids = [p.job.job_id for p in open_prereqs] + [t.handle.job_id for t in open_jobs]
        if ids:
            runner(["scancel", *ids])
        cancelled, cancel_deadline = why, clock() + CANCEL_WAIT

    def open_count() -> int:
        jobs = [t for t in tracked if not t.done and not t.parked]
        return len(jobs) + len([p for p in prereqs if not p.done])

    while True:
        try:
            if all(t.done for t in tracked):
                # a prerequisite watch cancelled is waited for, so that nothing the batch
                # started still runs when watch ends (bounded: see the deadlines)
                waiting = [p for p in prereqs if not p.done and p.cancelled is not None]
                if not waiting or (
                    all(p.cancelled == "chain" for p in waiting) and clock() >= chain_deadline
                ):
                    break
            open_jobs = [t for t in tracked if not t.done and not t.parked]
            open_prereqs = [p for p in prereqs if not p.done]
            ids = [p.job.job_id for p in open_prereqs] + [t.handle.job_id for t in open_jobs]
            statuses = slurm.query_many(runner, ids, accounting)
            ended_prereqs = []
            for p in open_prereqs:
                if p.handle.update(statuses[p.job.job_id], settle=False):
                    ended_prereqs.append(p)
                elif not remote or p.job.kind == "compile":  # for the compile's progress
                    for got, _ in p.handle.logs():
                        p.lines.extend(got)
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
            if ended or ended_prereqs:
                sleep(SETTLE)
                for t in ended:  # ended; decided below unless a prerequisite decides for it
                    t.parked = True
                stop: list[str] = []
                for p in ended_prereqs:  # in submission order: the import before the compile
                    stop += finish_prerequisite(p, timed_out)
                for t in tracked:  # every prerequisite it waits for has its verdict
                    if t.parked and all(p.done for p in t.after):
                        finish(t, timed_out)
                if stop:
                    runner(["scancel", *stop])
                    chain_deadline = clock() + CANCEL_WAIT
                continue  # ask again at once: the next ended job need not wait a poll
            now = clock()
            if deadline is not None and now >= deadline and not timed_out and cancelled is None:
                timed_out = True
                n = open_count()
                if keep_running:
                    console.say(f"[watch] timeout after {timeout:g}s; {n} job(s) keep running")
                    break
                console.say(f"[watch] timeout after {timeout:g}s: cancelling {n} job(s)")
                cancel_open("timeout")
            elif cancelled is not None and now >= cancel_deadline:
                break  # the cancel was not obeyed in time; the verdicts say what is left
            console.progress(_progress(tracked, statuses, prereqs))
            sleep(poll if cancelled is None else min(poll, SlurmJob.cancel_poll))
        except KeyboardInterrupt:
            console.clear()
            n = open_count()
            if cancelled is not None or on_interrupt is None or not on_interrupt(n):
                raise
            console.say(f"[watch] cancelling {n} job(s)")
            cancel_open("interrupt")
    for p in prereqs:  # what the loop left open: decided as it stands (its users first)
        if not p.done and any(not t.done for t in p.users):
            finish_prerequisite(p, timed_out)
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
        [p.to_json() for p in prereqs],
    )
    write_json(folder / RESULTS_FILE, result.to_json())
    return result


def _progress(
    tracked: list[Tracked],
    statuses: dict[str, slurm.JobStatus],
    prereqs: Sequence[Prerequisite] = (),
) -> str:
    done = [t for t in tracked if t.done]
    running = pending = 0
    for t in tracked:
        if t.done:
            continue
        state = (statuses.get(t.handle.job_id) or t.handle.st).state or ""
        if t.parked or state.startswith("PENDING"):
            pending += 1
        else:
            running += 1
    passed = sum(1 for t in done if t.result and t.result.verdict is Verdict.PASSED)
    failed = sum(1 for t in done if t.result and t.result.verdict is Verdict.FAILED)
    other = len(done) - passed - failed
    chain = ""
    for p in prereqs:
        if p.done:
            continue
        state = (statuses.get(p.job.job_id) or p.handle.st).state or "UNKNOWN"
        built = f", built {p.handle.percent}" if p.handle.percent else ""
        chain += f"; {p.handle.what} {state.split()[0]}{built}"
    return (
        f"[watch] {len(done)}/{len(tracked)} done, {running} running, {pending} pending, "
        f"{passed} passed, {failed} failed, {other} other{chain}"
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
            root = junit_root(data)  # refuses a DTD and what is not a JUnit report
        except JUnitError as exc:
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
    """A suite's count or time; 0 for what is no finite number (a job's report may say
    `inf`, `nan` or 5000 digits, which int() cannot take; decision 75)."""
    if not text or len(text) > 30:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0


def render_results(result: BatchResult) -> str:
    """The batch's verdicts for a person: the counts, then one line per job that did not pass."""
    data = result.to_json()
    counts = ", ".join(f"{n} {v}" for v, n in data["summary"]["verdicts"].items())
    lines = [f"batch: {len(result.jobs)} job(s): {counts or 'none'}"]
    for p in result.prerequisites:  # a prerequisite that failed: once, with its evidence
        if p["verdict"] not in (None, Verdict.PASSED.value) and p["cancelled_by_watch"] != "chain":
            lines.append(f"  {p['kind']} job {p['job_id']}: {p['verdict']} ({p['reason']})")
            lines += [f"    {e}" for e in p["evidence"]]
    for row in data["jobs"]:
        if row["verdict"] != Verdict.PASSED.value:
            lines.append(f"  {row['verdict']}: {row['entry'] or row['work_dir']} ({row['reason']})")
            failing = (row["tests"] or {}).get("failing") or []
            lines += [f"    failed {t}" for t in failing]
    lines += [f"note: {n}" for n in result.notes]
    lines.append(f"results: {result.batch_dir}/{RESULTS_FILE}")
    if result.junit:
        lines.append(f"junit: {result.junit}")
    return "\n".join(printable(line, None) for line in lines) + "\n"
