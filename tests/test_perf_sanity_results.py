"""perf-sanity results: submit.py's report.xml and the benchmark logs test_perf_sanity.py writes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trtllm_script_builder.process.figures import result_lines
from trtllm_script_builder.process.handles import read_local
from trtllm_script_builder.process.perf_sanity import (
    add_perf_sanity,
    benchmark_figures,
    read_perf_sanity,
)
from trtllm_script_builder.process.verdict import Decision, Verdict

# The closing block of the serving benchmark, as a client log holds it (figures made up).
BLOCK = """\
============ Serving Benchmark Result ============
Successful requests:                     64
Benchmark duration (s):                  41.20
Request throughput (req/s):              1.55
Output token throughput (tok/s):         1590.41
Total Token throughput (tok/s):          3180.82
User throughput (tok/s):                 24.85
---------------Time to First Token----------------
Mean TTFT (ms):                          120.40
Median TTFT (ms):                        118.00
P99 TTFT (ms):                           240.10
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          40.20
Median TPOT (ms):                        40.00
P99 TPOT (ms):                           44.90
---------------Inter-token Latency----------------
Mean ITL (ms):                           40.10
Median ITL (ms):                         39.90
P99 ITL (ms):                            45.00
----------------End-to-end Latency----------------
Mean E2EL (ms):                          41250.00
Median E2EL (ms):                        41200.00
P99 E2EL (ms):                           41900.00
==================================================
"""

REPORT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3" failures="1" skipped="0" errors="0">
<testcase classname="perf.test_perf_sanity" name="test_e2e[aggr-tiny_cfg-tiny_tp2]" time="90.1"/>
<testcase classname="perf.test_perf_sanity" name="test_e2e[aggr-tiny_cfg-tiny_tp4]" time="12.0">
<failure message="RuntimeError: Some metrics in Server 0 Client 0 are missing: ['mean_e2el']">tb</failure>
</testcase>
<testcase classname="perf.test_perf_sanity" name="test_e2e[../escape]" time="1"/>
</testsuite></testsuites>
"""


def _run(work: Path) -> None:
    (work / "report.xml").write_text(REPORT)
    tp2 = work / "aggr-tiny_cfg-tiny_tp2"
    tp2.mkdir()
    (tp2 / "trtllm-benchmark.0.0.log").write_text("noise 1: 2\n" + BLOCK)
    (tp2 / "trtllm-benchmark.0.1.log").write_text(BLOCK.replace("1590.41", "2900.5"))
    (tp2 / "trtllm-serve.0.log").write_text("Output token throughput (tok/s): 1\n")
    tp4 = work / "aggr-tiny_cfg-tiny_tp4"
    tp4.mkdir()
    (tp4 / "trtllm-benchmark.0.0.log").write_text(BLOCK.split("Mean E2EL")[0])


def test_benchmark_figures_names_them_as_the_test_does() -> None:
    got = benchmark_figures(BLOCK)
    assert got["seq_throughput"] == 1.55 and got["token_throughput"] == 1590.41
    assert got["mean_e2el"] == 41250.0 and got["p99_itl"] == 45.0
    assert len(got) == 16 and "duration" not in " ".join(got)


def test_cases_pass_or_fail_with_their_clients_figures(tmp_path: Path) -> None:
    _run(tmp_path)
    group, report, note = read_perf_sanity(read_local, str(tmp_path))
    assert note == "" and group is not None and report is not None
    assert (group["passed"], group["failed"], group["skipped"]) == (1, 1, 0)
    tp2, tp4 = group["cases"]  # a label that would leave work_dir is not a case
    assert (tp2["case"], tp2["outcome"], tp2["message"]) == ("aggr-tiny_cfg-tiny_tp2", "passed", "")
    assert tp2["id"] == "perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp2]"
    assert [(c["server"], c["client"], c["token_throughput"]) for c in tp2["clients"]] == [
        (0, 0, 1590.41),
        (0, 1, 2900.5),
    ]
    assert tp2["clients"][0]["log"] == "aggr-tiny_cfg-tiny_tp2/trtllm-benchmark.0.0.log"
    assert tp4["outcome"] == "failed" and "are missing" in tp4["message"]
    assert "mean_e2el" not in tp4["clients"][0] and tp4["clients"][0]["mean_ttft"] == 120.4
    assert (report.passed, report.failed, report.source) == (2, 1, "report.xml")


def test_a_run_without_a_report_adds_nothing_and_a_dtd_is_refused(tmp_path: Path) -> None:
    assert read_perf_sanity(read_local, str(tmp_path)) == (None, None, "")
    (tmp_path / "report.xml").write_text('<!DOCTYPE x [<!ENTITY a "b">]><testsuite/>')
    group, report, note = read_perf_sanity(read_local, str(tmp_path))
    assert (group, report) == (None, None) and note.startswith("perf-sanity report ")


def _spec(work: Path, category: int = 4) -> Any:
    return SimpleNamespace(category=category, work_dir=str(work), remote_work_dir=None)


def test_the_verdict_keeps_its_word_and_gains_the_cases(tmp_path: Path) -> None:
    _run(tmp_path)
    d = Decision(Verdict.PASSED, "exit code 0", ["Slurm state COMPLETED, exit code 0"])
    add_perf_sanity(d, _spec(tmp_path), read_local)
    assert d.verdict is Verdict.PASSED and d.tests is not None and d.tests.failed == 1
    lines = result_lines(d.results)
    assert lines[0] == "results: perf_sanity: aggr-tiny_cfg-tiny_tp2: passed"
    assert lines[1].startswith("  client 0.0: seq_throughput 1.55, token_throughput 1590.41")
    assert "results: perf_sanity: aggr-tiny_cfg-tiny_tp4: failed" in lines
    other = Decision(Verdict.PASSED, "exit code 0")
    add_perf_sanity(other, _spec(tmp_path, 6), read_local)
    assert other.results == {} and other.tests is None
