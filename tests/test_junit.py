"""The JUnit reader, pytest's summary line and the eval/bench figures: pure, no cluster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from trtllm_script_builder.process.figures import figures
from trtllm_script_builder.process.handles import read_junit, read_local
from trtllm_script_builder.process.junit import (
    MAX_IDS,
    MAX_MESSAGE,
    JUnitError,
    node_id,
    parse_junit,
    summary_report,
)

# What pytest 8 writes for tests/slurm's fixture repo: one pass, one skip, one failure,
# and a test whose teardown errored after it passed.
REPORT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" skipped="1"
 tests="4" time="0.05" timestamp="2025-01-01T00:00:00" hostname="node1">
<testcase classname="accuracy.test_tiny.TestTiny" name="test_two_gpus" time="0.001" />
<testcase classname="accuracy.test_tiny.TestTiny" name="test_eight_gpus[tp8]" time="0.000">
<skipped type="pytest.skip" message="Device count 2 is less than 8">accuracy/test_tiny.py:22:
 Device count 2 is less than 8</skipped></testcase>
<testcase classname="accuracy.test_tiny.TestBroken" name="test_asserts_false" time="0.001">
<failure message="AssertionError: this test fails on purpose&#10;assert False">self = ...
E   AssertionError: this test fails on purpose</failure></testcase>
<testcase classname="test_plain" name="test_teardown" time="0.001">
<error message="failed on teardown with &quot;RuntimeError: gone&quot;">...</error></testcase>
</testsuite></testsuites>
"""


def test_counts_ids_and_messages() -> None:
    r = parse_junit(REPORT, "x_junit.xml")
    assert (r.passed, r.failed, r.errors, r.skipped) == (1, 1, 1, 1)
    assert not r.nothing_ran
    assert [t.show() for t in r.skipped_tests] == [
        "accuracy/test_tiny.py::TestTiny::test_eight_gpus[tp8]: Device count 2 is less than 8"
    ]
    assert [(t.id, t.message) for t in r.failing] == [
        (
            "accuracy/test_tiny.py::TestBroken::test_asserts_false",
            "AssertionError: this test fails on purpose assert False",
        ),
        ("test_plain.py::test_teardown", 'failed on teardown with "RuntimeError: gone"'),
    ]
    data = r.to_json()
    assert data["source"] == "x_junit.xml" and data["skipped"] == 1
    assert data["failing"][0]["id"].endswith("::test_asserts_false")


def test_a_single_testsuite_root_and_an_all_skipped_run() -> None:
    r = parse_junit(
        b'<testsuite tests="1"><testcase classname="a.b.TestC" name="t">'
        b'<skipped message="needs 8 GPUs"/></testcase></testsuite>'
    )
    assert (r.passed, r.skipped, r.nothing_ran) == (0, 1, True)
    assert parse_junit(b'<testsuites><testsuite tests="0"/></testsuites>').nothing_ran


def test_long_messages_and_many_tests_are_cut() -> None:
    cases = "".join(
        f'<testcase classname="m" name="t{i}"><failure message="{"x" * 1000}"/></testcase>'
        for i in range(MAX_IDS + 10)
    )
    r = parse_junit(f"<testsuite>{cases}</testsuite>".encode())
    assert r.failed == MAX_IDS + 10  # counts stay exact
    assert len(r.failing) == MAX_IDS
    assert len(r.failing[0].message) == MAX_MESSAGE and r.failing[0].message.endswith("...")


@pytest.mark.parametrize(
    "data",
    [
        # billion laughs: entity expansion
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><testsuite>&lol2;</testsuite>',
        # external entity: a file of the host
        b'<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]><testsuite>&x;</testsuite>',
        b"<!doctype testsuite><testsuite/>",
        b"<testsuite>&undefined;</testsuite>",  # no DTD, so no entity but the five of XML
        b"<testsuite><testcase",  # cut short (the job died writing it)
        b"",
        b"<html><body/></html>",
    ],
)
def test_hostile_or_broken_xml_is_refused(data: bytes) -> None:
    with pytest.raises(JUnitError):
        parse_junit(data)


@pytest.mark.parametrize(
    ("classname", "name", "expected"),
    [
        ("accuracy.test_llm_api.TestLlama", "test_a[tp4]", "accuracy/test_llm_api.py::TestLlama::test_a[tp4]"),
        ("test_mod", "test_f", "test_mod.py::test_f"),
        ("a.test_m.TestOuter.TestInner", "test_x", "a/test_m.py::TestOuter::TestInner::test_x"),
        ("", "test_y", "test_y"),
    ],
)  # fmt: skip
def test_ids_in_pytest_form(classname: str, name: str, expected: str) -> None:
    assert node_id(classname, name) == expected


@dataclass
class _Spec:
    workflow_type: str
    work_dir: str
    junit_file_pattern: str | None
    remote_work_dir: str | None = None


def test_read_junit_finds_the_job_file_and_notes_a_refused_one(tmp_path: Path) -> None:
    spec = _Spec("pytest", str(tmp_path), "m_auto_test_%j_junit.xml")
    assert read_junit(read_local, spec, "42") == (None, "")  # type: ignore[arg-type]
    (tmp_path / "m_auto_test_42_junit.xml").write_bytes(REPORT)
    report, note = read_junit(read_local, spec, "42")  # type: ignore[arg-type]
    assert report is not None and report.failed == 1 and note == ""
    assert report.source == "m_auto_test_42_junit.xml"
    (tmp_path / "m_auto_test_43_junit.xml").write_bytes(b"<!DOCTYPE x><testsuite/>")
    report, note = read_junit(read_local, spec, "43")  # type: ignore[arg-type]
    assert report is None and "not read: the file declares a DTD" in note
    other = _Spec("custom", str(tmp_path), "m_auto_test_%j_junit.xml")
    assert read_junit(read_local, other, "42") == (None, "")  # type: ignore[arg-type]


# ---------------------------------------------------------------- pytest's summary line


@pytest.mark.parametrize(
    ("line", "counts"),
    [
        ("============ 1 passed, 1 skipped in 0.02s ============", (1, 0, 0, 1)),
        ("=================== no tests ran in 0.01s ===================", (0, 0, 0, 0)),
        ("1 skipped in 0.01s", (0, 0, 0, 1)),
        ("==== 2 failed, 1 error, 3 passed, 1 warning in 1.50s (0:00:01) ====", (3, 2, 1, 0)),
        ("===== 4 deselected in 0.02s =====", (0, 0, 0, 0)),
    ],
)
def test_summary_line(line: str, counts: tuple[int, int, int, int]) -> None:
    found = summary_report(["collected 2 items", line, "Job 1 finished with exit code 0"])
    assert found is not None
    r, index = found
    assert index == 1 and (r.passed, r.failed, r.errors, r.skipped) == counts


def test_no_summary_line() -> None:
    assert summary_report(["3 passed the check", "all good in 0.1s", "passed"]) is None


# ---------------------------------------------------------------- eval and bench figures


def test_eval_figures_per_task() -> None:
    log = "[TRT-LLM] [I]"
    lines = [
        f"{log} lm-eval gsm8k results (scores normalized to range 0~100):",
        "|gsm8k|3|flexible-extract|5|exact_match|75.00|",
        f"{log} lm-eval gsm8k average accuracy: 75.00",
        f"{log} Average accuracy 70.00 (14042) - STEM",
        f"{log} MMLU weighted average accuracy: 71.25 (14042)",
        f"{log} Beam 0 rouge scores:",
        f"{log} \trouge1: 30.500",
        f"{log} \trougeLsum: 28.000",
        f"{log} TRTLLM execution time: 0.020 seconds.",
    ]
    assert figures(lines) == {
        "gsm8k": {"accuracy": 75.0},
        "mmlu": {"accuracy": 71.25, "samples": 14042},
        "cnn_dailymail": {"rouge1": 30.5, "rougeLsum": 28.0},
    }


def _hypothesis_report(
    metric: str, higher: bool, ref: float, limit: float, got: float
) -> list[str]:
    """The report TensorRT-LLM's accuracy tests log after a task's score (one logger record)."""
    return [
        "[TRT-LLM] [I] Hypothesis testing report:",
        "===========================================================",
        f"= {metric.upper()} HYPOTHESIS TESTING",
        "===========================================================",
        "Alpha (Type I:  False Positive): 0.050",
        "Beta  (Type II: False Negative): 0.200",
        "Sigma (Standard deviation): 50.000",
        "#Samples: 1319",
        f"Higher is better: {higher}",
        "Theta (Minimum detectable effect): 4.841",
        f"Reference {metric}: {ref:.3f}",
        f"Threshold: {limit:.3f}",
        "===========================================================",
        f"Evaluated {metric}: {got:.3f}",
        "===========================================================",
    ]


def test_eval_scores_carry_the_accuracy_tests_reference_and_threshold() -> None:
    lines = [
        "[TRT-LLM] [I] lm-eval gsm8k average accuracy: 75.00",
        *_hypothesis_report("accuracy", True, 74.0, 70.797, 75.0),
        "[TRT-LLM] [I] MMLU weighted average accuracy: 60.00 (14042)",
        *_hypothesis_report("accuracy", True, 68.0, 66.5, 60.0),
        # a lower-is-better metric with no score line of ours before it
        *_hypothesis_report("WER", False, 10.0, 14.0, 12.0),
    ]
    got = figures(lines)
    assert got["gsm8k"] == {
        "accuracy": 75.0,
        "accuracy_reference": 74.0,
        "accuracy_threshold": 70.797,
        "higher_is_better": True,
        "passed": True,
    }
    assert got["mmlu"]["passed"] is False and got["mmlu"]["accuracy_threshold"] == 66.5
    assert got["wer"] == {
        "wer": 12.0,
        "wer_reference": 10.0,
        "wer_threshold": 14.0,
        "higher_is_better": False,
        "passed": True,
    }


def test_a_threshold_line_without_its_report_is_not_a_result() -> None:
    assert figures(["Threshold: 3.000", "Evaluated accuracy: 1.000"]) == {}


def test_bench_figures() -> None:
    lines = [
        "Number of requests:                               3",
        "Request Throughput (req/sec):                     12.5000",
        "Total Output Throughput (tokens/sec):             1600.0000",
        "Total Token Throughput (tokens/sec):              3200.0000",
        "Total Latency (ms):                               320.0000",
        "Average request latency (ms):                     250.0000",
        "Request Throughput (req/sec):                     12.5000",  # a second rank's copy
    ]
    assert figures(lines) == {
        "bench": {
            "request_throughput_req_per_sec": 12.5,
            "total_output_throughput_tokens_per_sec": 1600.0,
            "total_token_throughput_tokens_per_sec": 3200.0,
            "total_latency_ms": 320.0,
            "average_request_latency_ms": 250.0,
        }
    }


def test_no_figures_in_an_ordinary_log() -> None:
    assert figures(["3 passed in 0.1s", "accuracy: fine", "Throughput is high"]) == {}
