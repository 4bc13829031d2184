"""What a perf-sanity run leaves in its work_dir, read into the verdict's `results`.

The launch script the repo's submit.py writes runs `pytest perf/test_perf_sanity.py` with
`--output-dir=<work_dir>` and `--junitxml=<work_dir>/report.xml` (tests/integration/defs/perf/
test_perf_sanity.py in TensorRT-LLM; docs/verdicts.md). For each case (`test_e2e[<label>]`) the
test writes into `<work_dir>/<label>/`: the server's log `trtllm-serve.<server>.log` and, per
benchmark client, `trtllm-benchmark.<server>.<client>.log`, the output of the serving benchmark
whose closing block has lines such as `Request throughput (req/s):  12.50` and
`Mean E2EL (ms):  250.00`; the test takes its figures from those lines and fails a case whose
block misses one. Here: the JUnit report gives pass/fail per case, the benchmark logs the
figures, named as the test names them (`seq_throughput`, `token_throughput`, `mean_ttft`, ...).

Files are read through a `Reader` (the local disk, or ssh for a remote job), each at most
once, and only where the report names a case. Decision perf-sanity-results.
"""

from __future__ import annotations

import posixpath
import re
import xml.etree.ElementTree as ET
from typing import Any

from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.handles import MAX_READ, Reader
from trtllm_script_builder.process.junit import (
    MAX_IDS,
    JUnitError,
    TestReport,
    junit_root,
    message,
    node_id,
    report_of,
)
from trtllm_script_builder.process.verdict import MAX_EVIDENCE, Decision

JUNIT_NAME = "report.xml"  # submit.py's --junitxml=<work_dir>/report.xml
GROUP = "perf_sanity"  # the verdict's results key
MAX_SERVERS = 8  # servers per case whose benchmark logs are looked for
MAX_CLIENTS = 16  # clients per server

# The serving benchmark's closing block: the line's label -> the figure's name in the test.
METRICS: dict[str, str] = {
    "Request throughput (req/s)": "seq_throughput",
    "Output token throughput (tok/s)": "token_throughput",
    "Total Token throughput (tok/s)": "total_token_throughput",
    "User throughput (tok/s)": "user_throughput",
    "Mean TTFT (ms)": "mean_ttft",
    "Median TTFT (ms)": "median_ttft",
    "P99 TTFT (ms)": "p99_ttft",
    "Mean TPOT (ms)": "mean_tpot",
    "Median TPOT (ms)": "median_tpot",
    "P99 TPOT (ms)": "p99_tpot",
    "Mean ITL (ms)": "mean_itl",
    "Median ITL (ms)": "median_itl",
    "P99 ITL (ms)": "p99_itl",
    "Mean E2EL (ms)": "mean_e2el",
    "Median E2EL (ms)": "median_e2el",
    "P99 E2EL (ms)": "p99_e2el",
}
# no float infinity (decision shown-never-obeyed)
_LINE = re.compile(r"(.+?):\s+(-?\d{1,30}(?:\.\d{1,30})?)")
_LABEL = re.compile(r"test_e2e\[(.+)\]")


def benchmark_figures(text: str) -> dict[str, float]:
    """The figures of one benchmark log, in METRICS' order; the first of each counts, as in
    the test."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.fullmatch(line.strip())
        if m and (key := METRICS.get(m.group(1).strip())) and key not in found:
            found[key] = float(m.group(2))
    return {k: found[k] for k in METRICS.values() if k in found}


def cases(root: ET.Element) -> list[dict[str, Any]]:
    """Each test_e2e case of the JUnit report (`root` from `junit_root`): its id, label,
    outcome and message."""
    out: list[dict[str, Any]] = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        m = _LABEL.fullmatch(name)
        if not m or "/" in m.group(1) or m.group(1) in (".", ".."):
            continue
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        outcome, why = "passed", None
        if failure is not None or error is not None:
            outcome, why = "failed", failure if failure is not None else error
        elif skipped is not None:
            outcome, why = "skipped", skipped
        out.append(
            {
                "id": node_id(case.get("classname", ""), name),
                "case": m.group(1),
                "outcome": outcome,
                "message": message(why),
            }
        )
        if len(out) >= MAX_IDS:
            break
    return out


def read_perf_sanity(
    read: Reader, base: str
) -> tuple[dict[str, Any] | None, TestReport | None, str]:
    """The `perf_sanity` results group, the per-test report and a note (a refused report)
    for the run whose work_dir is `base`; (None, None, "") when it left no report."""
    path = posixpath.join(base, JUNIT_NAME)
    data = read(path, 0)
    if not data:
        return None, None, ""
    if len(data) >= MAX_READ:
        return None, None, f"perf-sanity report {path} not read: larger than {MAX_READ} bytes"
    try:
        root = junit_root(data)
    except JUnitError as e:
        return None, None, f"perf-sanity report {path} not read: {e}"
    found, report = cases(root), report_of(root, JUNIT_NAME)
    for case in found:
        clients: list[dict[str, Any]] = []
        for server in range(MAX_SERVERS):
            before = len(clients)
            for client in range(MAX_CLIENTS):
                name = f"{case['case']}/trtllm-benchmark.{server}.{client}.log"
                text = read(posixpath.join(base, name), 0)
                if text is None:
                    break
                figures = benchmark_figures(text.decode("utf-8", "replace"))
                clients.append({"server": server, "client": client, "log": name, **figures})
            if len(clients) == before:
                break  # no client of this server: no further server either
        case["clients"] = clients
    group = {
        "source": JUNIT_NAME,
        "passed": sum(c["outcome"] == "passed" for c in found),
        "failed": sum(c["outcome"] == "failed" for c in found),
        "skipped": sum(c["outcome"] == "skipped" for c in found),
        "cases": found,
    }
    return group, report, ""


def add_perf_sanity(decision: Decision, spec: JobSpec, read: Reader) -> None:
    """A perf-sanity job's cases and figures into `decision` (results, and tests when the
    verdict has none); it does not change the verdict. Every category 4 job runs
    test_perf_sanity.py through submit.py's launch script, whatever its workflow_type (`pytest`
    for a perf-sanity test id, `perf_sanity` for a config named by perf_config_yaml)."""
    if spec.category != 4:
        return
    group, report, note = read_perf_sanity(read, spec.remote_work_dir or spec.work_dir)
    if group is not None:
        decision.results[GROUP] = group
    if report is not None and decision.tests is None:
        decision.tests = report
    if note:
        decision.evidence = [*decision.evidence[: MAX_EVIDENCE - 1], note]
