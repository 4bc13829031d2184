"""What `watch DIR` gives for a build-many folder: `results.json` (counts per verdict, one row
per job), `junit.xml` (every pytest job's report, merged), the progress line and the summary
for a person. The jobs are followed by the one run loop (follow.py)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process.follow import Loop, Tracked, WatchResult
from trtllm_script_builder.process.handles import MAX_READ, Reader, junit_path, read_local
from trtllm_script_builder.process.junit import JUnitError, junit_root
from trtllm_script_builder.process.slurm_submit import BatchJob
from trtllm_script_builder.process.verdict import Verdict

RESULTS_FILE = "results.json"
JUNIT_FILE = "junit.xml"


def batch_exit_status(verdicts: list[Verdict]) -> int:
    """0 when every job PASSED; when every job that did not pass has one verdict, that
    verdict's status; 1 when they differ (decision batch-exit-status)."""
    bad = {v for v in verdicts if v is not Verdict.PASSED}
    if not bad:
        return 0
    if len(bad) == 1:
        return next(iter(bad)).exit_code
    return 1


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


def progress(loop: Loop) -> str:
    """The batch's progress line: counts of jobs, and each open prerequisite's state."""
    tracked = loop.tracked
    done = [t for t in tracked if t.done]
    running = pending = 0
    for t in tracked:
        if t.done:
            continue
        st = getattr(t.handle, "st", None)  # a batch's jobs are Slurm jobs
        state = (st.state if st else None) or ""
        if t.parked or state.startswith("PENDING"):
            pending += 1
        else:
            running += 1
    passed = sum(1 for t in done if t.result and t.result.verdict is Verdict.PASSED)
    failed = sum(1 for t in done if t.result and t.result.verdict is Verdict.FAILED)
    other = len(done) - passed - failed
    chain = ""
    for p in loop.prereqs:
        if p.done:
            continue
        state = p.handle.st.state or "UNKNOWN"
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
        own = getattr(t.handle, "own_id", None)
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
            suite.set("name", Path(t.work_dir).name)
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
    # the failures' messages and output: private, as verdict.json (decision shared-work-dir)
    write_file(out, '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n", 0o600)
    return str(out), notes


def _number(text: str | None) -> float:
    """A suite's count or time; 0 for what is no finite number (a job's report may say
    `inf`, `nan` or 5000 digits, which int() cannot take; decision shown-never-obeyed)."""
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
