"""`report DIR`: one self-contained HTML page over what `watch` decided, for people.

DIR is a job folder (its `verdict.json`) or a batch folder of `build-many` (its `jobs.json`,
each built row's folder read for its own `verdict.json`; a row not yet watched shows as
NOT_WATCHED, one not submitted as NOT_SUBMITTED, a row that did not build as BUILD_ERROR; a job
folder that was built but not judged shows the same way). The page has no script and loads
nothing: styles inline, the bench chart an SVG drawn here. Every value from the files goes
through Jinja2's autoescape (test ids and messages are the job's words, not ours), and the
same files give the same bytes (no clock, no dict order from the disk). Decision static-html-report.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard
from urllib.parse import quote

import jinja2

from trtllm_script_builder.atomic import read_regular, write_file
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.datafile import parse_json
from trtllm_script_builder.render import TEMPLATES
from trtllm_script_builder.resolve.workflow import workflows

REPORT_FILE = "report.html"
PRIVATE = 0o600  # the page quotes log lines, as verdict.json does (decision shared-work-dir)
MAX_JSON = 64 * 1024 * 1024  # bytes of a verdict.json or jobs.json read
VERDICT_FILE = "verdict.json"
JOBS_FILE = "jobs.json"
TEMPLATE = "report.html.j2"

# The summary's order: the verdicts of `watch` (docs/verdicts.md), then the report's own two.
STATUSES = (
    "PASSED",
    "FAILED",
    "NOT_RUN",
    "TIMEOUT",
    "CANCELLED",
    "OUT_OF_MEMORY",
    "HANG_DETECTED",
    "INFRA_FAILURE",
    "COMPILE_FAILED",
    "NOT_WATCHED",
    "NOT_SUBMITTED",
    "BUILD_ERROR",
)
# What `build` and `submit` leave in a folder (process/ writes them; this layer only looks).
JOB_SPEC_FILE = "job_spec.json"
SUBMITTED = ("submission.json", "batch_submission.json")
NOT_SUBMITTED_YET = "built, not submitted yet (trtllm-script-builder submit <its folder>)"
# Per bench figure: the chart it goes in. trtllm-bench's report lines (process/figures.py) and
# the perf-sanity benchmark client's (process/perf_sanity.py) share a panel when they measure
# the same thing in the same unit.
THROUGHPUT = ("Output throughput", "tokens/s")
LATENCY = ("Mean request latency", "ms")
CHART_FIGURES: dict[str, tuple[str, str]] = {
    "total_output_throughput_tokens_per_sec": THROUGHPUT,
    "token_throughput": THROUGHPUT,
    "average_request_latency_ms": LATENCY,
    "mean_e2el": LATENCY,
}


@dataclass
class Link:
    text: str
    href: str | None  # relative to the report; None when the file is not on this machine


@dataclass
class Score:
    task: str
    metric: str
    value: str
    threshold: str
    ok: bool | None  # None: no threshold to judge by


@dataclass
class Bar:
    label: str
    value: float


@dataclass
class Panel:
    title: str
    unit: str
    bars: list[Bar] = field(default_factory=list)


@dataclass
class Job:
    name: str
    href: str | None
    status: str
    entry: str = ""
    job_id: str = ""
    commit: str = ""  # the synced commit a remote compile chain built and tested
    exit_code: str = ""
    elapsed: str = ""
    reason: str = ""
    evidence: list[str] = field(default_factory=list)
    logs: list[Link] = field(default_factory=list)
    tests: dict[str, Any] | None = None
    scores: list[Score] = field(default_factory=list)
    bench: dict[str, float] = field(default_factory=dict)
    cases: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Report:
    title: str
    jobs: list[Job]

    def counts(self) -> list[tuple[str, int]]:
        return [(s, n) for s in STATUSES if (n := sum(j.status == s for j in self.jobs))]


# ---------------------------------------------------------------- reading


def _read(path: Path) -> str:
    """A file of the folder, never through a link nor from a named pipe: a folder may be a
    team's, and a verdict linked to another of the user's would land in the page
    (decision shared-work-dir)."""
    data = read_regular(str(path), 0, MAX_JSON + 1)
    if data is None:
        if not os.path.lexists(path):
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        raise OSError(errno.EINVAL, "not a regular file")
    if len(data) > MAX_JSON:
        raise OSError(errno.EFBIG, f"more than {MAX_JSON} bytes")
    return data.decode("utf-8")


def _read_json(path: Path) -> Any:
    try:
        return parse_json(_read(path))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc).split("\n")[0]
        raise BuildError(
            "dir",
            f"{path} cannot be read as JSON ({reason})",
            "run `watch` (or `build-many`) again to write it whole",
        ) from None


def load_report(folder: Path) -> Report:
    """The report's content for a job folder or a batch folder."""
    folder = folder.resolve()
    if (folder / JOBS_FILE).is_file():
        rows = _read_json(folder / JOBS_FILE)
        if not isinstance(rows, list):
            raise BuildError(
                "dir",
                f"{folder / JOBS_FILE} is not a list of jobs",
                "point at a batch folder that `build-many` wrote",
            )
        return Report(
            folder.name, [_batch_job(folder, row) for row in rows if isinstance(row, dict)]
        )
    if (folder / VERDICT_FILE).is_file():
        verdict = _read_json(folder / VERDICT_FILE)
        if not isinstance(verdict, dict):
            raise BuildError(
                "dir",
                f"{folder / VERDICT_FILE} is not a verdict of watch",
                "run `trtllm-script-builder watch WORK_DIR` again",
            )
        return Report(folder.name, [_job(folder, folder, folder.name, verdict)])
    if (folder / JOB_SPEC_FILE).is_file():  # built; not run, or not judged yet
        return Report(folder.name, [_unjudged(folder, folder, folder.name, "")])
    raise BuildError(
        "dir",
        f"{folder} has no verdict.json, job_spec.json or jobs.json",
        "give a job folder that `build` wrote, or a batch folder that `build-many` wrote",
    )


def _batch_job(root: Path, row: dict[str, Any]) -> Job:
    entry = str(row.get("entry", ""))
    if row.get("status") != "built" or not row.get("work_dir"):
        job = Job(entry or f"line {row.get('line', '?')}", None, "BUILD_ERROR", entry=entry)
        job.reason = str(row.get("error", ""))
        return job
    work = Path(str(row["work_dir"]))
    if not work.is_absolute():
        work = root / work
    unwatched = _unjudged(root, work, work.name, entry)
    try:
        verdict = parse_json(_read(work / VERDICT_FILE))
    except FileNotFoundError:
        return unwatched
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0]
        unwatched.reason = f"{VERDICT_FILE} cannot be read: {why}"
        return unwatched
    return _job(root, work, work.name, verdict, entry) if isinstance(verdict, dict) else unwatched


def _unjudged(root: Path, work: Path, name: str, entry: str) -> Job:
    """A built job with no verdict: NOT_SUBMITTED until `submit` recorded it, then
    NOT_WATCHED."""
    if any((folder / f).is_file() for folder in {root, work} for f in SUBMITTED):
        return Job(name, _href(root, work, folder=True), "NOT_WATCHED", entry=entry)
    job = Job(name, _href(root, work, folder=True), "NOT_SUBMITTED", entry=entry)
    job.reason = NOT_SUBMITTED_YET
    return job


def _href(root: Path, path: Path, folder: bool = False) -> str | None:
    """A link relative to the report; None for a file that is not here or lies outside the
    report's folder (a path in jobs.json or verdict.json may name any file;
    decision shown-never-obeyed)."""
    if not path.exists():
        return None
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    if rel == ".." or rel.startswith(("../", "/")):
        return None
    if folder:
        rel = "." if rel == "." else rel + "/"
    return quote(rel)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _job(root: Path, work: Path, name: str, v: dict[str, Any], entry: str = "") -> Job:
    status = str(v.get("verdict") or "NOT_WATCHED")
    if status not in STATUSES:
        status = "FAILED"
    elapsed = v.get("elapsed_seconds")
    job = Job(
        name,
        _href(root, work, folder=True) if work != root else None,
        status,
        entry=entry,
        job_id=_text(v.get("job_id") or (f"pid {v['pid']}" if v.get("pid") else "")),
        commit=_text(v.get("source_commit")),
        exit_code=_text(v.get("exit_code")),
        elapsed=_duration(elapsed) if _is_num(elapsed) else "",
        reason=_text(v.get("reason")),
        evidence=[str(e) for e in v.get("evidence") or []],
    )
    for log in v.get("log_files") or []:
        path = Path(str(log))
        if not path.is_absolute():
            path = work / path
        job.logs.append(Link(path.name, _href(root, path)))
    tests = v.get("tests")
    job.tests = _tests(tests) if isinstance(tests, dict) else None
    results = v.get("results")
    if isinstance(results, dict):
        figures = {wf.results for wf in workflows() if wf.results}
        job.scores = list(_scores(results, figures))
        for group, values in results.items():
            if group in figures and isinstance(values, dict):
                job.bench.update({k: x for k, x in values.items() if _is_num(x)})
            elif _is_cases(values):
                job.cases += [c for c in values["cases"] if isinstance(c, dict)]
    return job


def _tests(t: dict[str, Any]) -> dict[str, Any]:
    """The verdict's `tests`, every field of the shape the page reads."""

    def outcomes(key: str) -> list[dict[str, str]]:
        got = t.get(key)
        rows = got if isinstance(got, list) else []
        return [
            {"id": _text(r.get("id")), "message": _text(r.get("message"))}
            for r in rows
            if isinstance(r, dict)
        ]

    counts = {
        k: t.get(k) if _is_num(t.get(k)) else 0 for k in ("passed", "failed", "errors", "skipped")
    }
    return {
        **counts,
        "source": _text(t.get("source")),
        "failing": outcomes("failing"),
        "skipped_tests": outcomes("skipped_tests"),
    }


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def _is_num(x: Any) -> TypeGuard[float]:
    """A number the page can show and chart: NaN and Infinity (a verdict.json may hold them,
    Python's JSON reader takes them) are none (decision shown-never-obeyed)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _num(x: float) -> str:
    return f"{x:,.2f}".rstrip("0").rstrip(".") if isinstance(x, float) else f"{x:,}"


def _is_cases(values: Any) -> TypeGuard[dict[str, Any]]:
    """A group of cases (perf-sanity's), each with its outcome and clients."""
    return isinstance(values, dict) and isinstance(values.get("cases"), list)


def _scores(results: dict[str, Any], groups: set[str]) -> Iterable[Score]:
    """Eval figures per task: every group that is neither a workflow's figures nor a group of
    cases. A task's `<metric>_threshold` (or `threshold` for its accuracy) judges the metric;
    a task's `passed` (true/false) wins over the comparison."""
    for task, figures in results.items():
        if task in groups or _is_cases(figures) or not isinstance(figures, dict):
            continue
        for metric, value in figures.items():
            if not _is_num(value) or metric == "samples" or metric.endswith("threshold"):
                continue
            limit = figures.get(f"{metric}_threshold")
            if limit is None and metric == "accuracy":
                limit = figures.get("threshold")
            ok: bool | None = None
            if _is_num(limit):
                ok = value >= limit
            if metric == "accuracy" and isinstance(figures.get("passed"), bool):
                ok = figures["passed"]
            shown = _num(value)
            if metric == "accuracy" and _is_num(figures.get("samples")):
                shown += f" ({figures['samples']:,} samples)"
            yield Score(task, metric, shown, _num(limit) if _is_num(limit) else "", ok)


def _panels(jobs: list[Job]) -> list[Panel]:
    """Bars per chart: each bench job's figure, and each perf-sanity client's."""
    panels: dict[tuple[str, str], Panel] = {}
    for job in jobs:
        rows: list[tuple[str, dict[str, Any]]] = []
        if job.bench:
            rows.append((job.name, dict(job.bench)))
        for case in job.cases:
            for client in case.get("clients") or []:
                if isinstance(client, dict):
                    label = f"{case.get('case', '')} {client.get('server', 0)}.{client.get('client', 0)}"
                    rows.append((f"{job.name}: {label}", client))
        for label, figures in rows:
            for key, (title, unit) in CHART_FIGURES.items():
                value = figures.get(key)
                if _is_num(value):
                    panel = panels.setdefault((title, unit), Panel(title, unit))
                    panel.bars.append(Bar(label, float(value)))
    return [panels[k] for k in (THROUGHPUT, LATENCY) if k in panels]


# ---------------------------------------------------------------- the chart


@dataclass
class SvgBar:
    label: str
    value: str
    y: int
    width: float


@dataclass
class SvgPanel:
    title: str
    y: int
    bars: list[SvgBar]


@dataclass
class Chart:
    width: int
    height: int
    label_width: int
    bar_x: int
    bar_max: int
    panels: list[SvgPanel]


BAR_H, BAR_GAP, TITLE_H, PANEL_GAP = 18, 6, 26, 14


def chart(panels: list[Panel]) -> Chart | None:
    """Horizontal bars, one panel per figure, each scaled to its own largest value."""
    if not panels:
        return None
    longest = max(len(b.label) for p in panels for b in p.bars)
    label_width = min(max(120, 7 * longest), 420)
    bar_x, bar_max = label_width + 10, 360
    width = bar_x + bar_max + 110
    y = 4
    out = []
    for p in panels:
        top = max(b.value for b in p.bars) or 1.0
        bars = []
        by = y + TITLE_H
        for b in p.bars:
            w = round(max(b.value, 0.0) / top * bar_max, 1)
            bars.append(SvgBar(b.label, f"{_num(b.value)} {p.unit}", by, w))
            by += BAR_H + BAR_GAP
        out.append(SvgPanel(f"{p.title} ({p.unit})", y, bars))
        y = by + PANEL_GAP
    return Chart(width, y, label_width, bar_x, bar_max, out)


# ---------------------------------------------------------------- the page


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # every value is the job's text: escaped, always
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        auto_reload=False,
    )
    env.filters["num"] = _num
    return env


def render_report(report: Report) -> str:
    return (
        _env()
        .get_template(TEMPLATE)
        .render(
            report=report,
            counts=report.counts(),
            chart=chart(_panels(report.jobs)),
            score_jobs=[j for j in report.jobs if j.scores],
            test_jobs=[j for j in report.jobs if j.tests],
            bench_jobs=[j for j in report.jobs if j.bench],
            case_jobs=[j for j in report.jobs if j.cases],
        )
    )


def write_report(folder: Path) -> Path:
    """Write DIR/report.html whole; its path."""
    report = load_report(folder)
    page = render_report(report)
    path = folder.resolve() / REPORT_FILE
    try:
        write_file(path, page, PRIVATE)  # it quotes the verdicts' log lines
    except OSError as exc:
        raise BuildError(
            "dir",
            f"cannot write {path} ({exc.strerror})",
            "give a folder you can write to",
        ) from None
    return path
