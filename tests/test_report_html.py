"""`report DIR`: the HTML page over verdicts, checked as text and in a real headless browser."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.output.report_html import load_report, render_report, write_report

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "t.py::test_x[<script>alert(\"x\")</script>-'q'&amp;</svg>]"
HOSTILE_MSG = "AssertionError: a < b && \"c\" > 'd' </svg><img src=x onerror=alert(1)>"


def _verdict(work: Path, verdict: str, **extra: Any) -> dict[str, Any]:
    log = work / f"job_{extra.get('job_id', '1')}.out"
    log.write_text("log\n")
    v: dict[str, Any] = {
        "verdict": verdict,
        "exit_code": 0 if verdict == "PASSED" else 1,
        "job_id": "4242",
        "state": "COMPLETED" if verdict == "PASSED" else "FAILED",
        "evidence": ["Slurm state COMPLETED, exit code 0"],
        "reason": "exit code 0",
        "tests": None,
        "results": {},
        "log_files": [str(log)],
        "elapsed_seconds": 754.2,
        "work_dir": str(work),
    }
    v.update(extra)
    return v


def make_batch(root: Path) -> Path:
    """A realistic batch: pytest jobs that passed, failed, ran nothing and timed out, an eval
    job with scores, two bench jobs, one not watched yet and one that did not build."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "batch_submission.json").write_text(
        "{}"
    )  # submitted: a job with no verdict is unwatched
    jobs: list[tuple[str, str, dict[str, Any] | None]] = [
        (
            "00003_llama3_1_8binstruct",
            "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_auto_dtype",
            {
                "verdict": "PASSED",
                "job_id": "4242",
                "evidence": [
                    "Slurm state COMPLETED, exit code 0",
                    "llama3_1_8binstruct_auto_test_4242.out:88: 1 passed in 312.40s",
                ],
                "tests": {
                    "source": "llama3_1_8binstruct_auto_test_4242_junit.xml",
                    "passed": 1,
                    "failed": 0,
                    "errors": 0,
                    "skipped": 0,
                    "failing": [],
                    "skipped_tests": [],
                },
            },
        ),
        (
            "00004_llama3_1_8binstruct",
            "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_fp8[tp2]",
            {
                "verdict": "FAILED",
                "job_id": "4243",
                "reason": "failure pattern in the output",
                "evidence": [
                    "Slurm state FAILED, exit code 1",
                    "failed accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_fp8[tp2]: "
                    "AssertionError: accuracy 61.2 below 64.0",
                ],
                "tests": {
                    "source": "junit.xml",
                    "passed": 3,
                    "failed": 1,
                    "errors": 0,
                    "skipped": 1,
                    "failing": [
                        {
                            "id": "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_fp8[tp2]",
                            "message": "AssertionError: accuracy 61.2 below 64.0",
                        }
                    ],
                    "skipped_tests": [
                        {
                            "id": "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_fp8[tp8]",
                            "message": "Device count 2 is less than 8",
                        }
                    ],
                },
            },
        ),
        (
            "00005_llama3_1_8binstruct",
            "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_bfloat16_4gpus[tp4]",
            {
                "verdict": "NOT_RUN",
                "job_id": "4244",
                "exit_code": 0,
                "state": "COMPLETED",
                "reason": "no test passed (1 skipped; junit.xml)",
                "evidence": [
                    "Slurm state COMPLETED, exit code 0",
                    "skipped accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_bfloat16_4gpus[tp4]: Device count 2 is less than 4",
                ],
                "tests": {
                    "source": "junit.xml",
                    "passed": 0,
                    "failed": 0,
                    "errors": 0,
                    "skipped": 1,
                    "failing": [],
                    "skipped_tests": [
                        {
                            "id": "accuracy/test_llm_api_pytorch.py::TestLlama3_1_8BInstruct::test_bfloat16_4gpus[tp4]",
                            "message": "Device count 2 is less than 4",
                        }
                    ],
                },
            },
        ),
        (
            "00006_deepseek_v3_lite",
            "accuracy/test_llm_api_pytorch.py::TestDeepSeekV3Lite::test_nvfp4[moe_tp4]",
            {
                "verdict": "TIMEOUT",
                "job_id": "4245",
                "exit_code": 0,
                "state": "TIMEOUT",
                "elapsed_seconds": 3601.0,
                "reason": "Slurm state TIMEOUT",
                "evidence": [
                    "Slurm state TIMEOUT, exit code 0",
                    "slurmstepd: error: *** JOB 4245 ON gpunode CANCELLED AT 2026-12-03T05:12:09 DUE TO TIME LIMIT ***",
                ],
            },
        ),
        (
            "eval_gsm8k_mmlu",
            "trtllm-eval --model meta-llama/Llama-3.1-8B-Instruct gsm8k mmlu",
            {
                "verdict": "PASSED",
                "job_id": "4246",
                "results": {
                    "gsm8k": {"accuracy": 74.83, "threshold": 70.0},
                    "mmlu": {"accuracy": 66.1, "samples": 14042, "threshold": 68.0},
                },
            },
        ),
        (
            "bench_llama_tp1",
            "trtllm-bench --model meta-llama/Llama-3.1-8B-Instruct throughput --tp 1",
            {
                "verdict": "PASSED",
                "job_id": "4247",
                "results": {
                    "bench": {
                        "request_throughput_req_per_sec": 12.5,
                        "total_output_throughput_tokens_per_sec": 1600.0,
                        "average_request_latency_ms": 250.0,
                    }
                },
            },
        ),
        (
            "bench_llama_tp2",
            "trtllm-bench --model meta-llama/Llama-3.1-8B-Instruct throughput --tp 2",
            {
                "verdict": "PASSED",
                "job_id": "4248",
                "results": {
                    "bench": {
                        "request_throughput_req_per_sec": 21.0,
                        "total_output_throughput_tokens_per_sec": 2688.5,
                        "average_request_latency_ms": 171.25,
                    }
                },
            },
        ),
        (
            "00009_llama3_1_8binstruct",
            "accuracy/test_cli_flow.py::TestLlama::test_int8[1gpu]",
            None,
        ),
    ]
    rows: list[dict[str, Any]] = []
    for n, (name, entry, verdict) in enumerate(jobs, 3):
        work = root / name
        work.mkdir(exist_ok=True)
        (work / "job_spec.json").write_text("{}\n")
        if verdict is not None:
            v = _verdict(work, verdict.pop("verdict"), **verdict)
            (work / "verdict.json").write_text(json.dumps(v))
        rows.append({"line": n, "entry": entry, "work_dir": str(work), "status": "built"})
    rows.append(
        {
            "line": 11,
            "entry": "accuracy/test_x.py::test_y[tp2pp2",
            "status": "error",
            "error": "error: test_cmd: 'accuracy/test_x.py::test_y[tp2pp2' has unbalanced brackets; fix the test id",
        }
    )
    (root / "jobs.json").write_text(json.dumps(rows))
    return root


def test_a_batch_report_shows_every_job_with_its_verdict_and_links(tmp_path: Path) -> None:
    root = make_batch(tmp_path / "batch")
    path = write_report(root)
    assert path == root / "report.html"
    page = path.read_text()
    assert "9 jobs:" in page
    for pill in (
        "4 PASSED",
        "1 FAILED",
        "1 NOT_RUN",
        "1 TIMEOUT",
        "1 NOT_WATCHED",
        "1 BUILD_ERROR",
    ):
        assert f">{pill}</span>" in page, pill
    rows = re.findall(r'<tr class="job v-(\w+)"', page)
    assert rows == [
        "PASSED",
        "FAILED",
        "NOT_RUN",
        "TIMEOUT",
        "PASSED",
        "PASSED",
        "PASSED",
        "NOT_WATCHED",
        "BUILD_ERROR",
    ]
    # relative links to each job folder and its logs, nothing absolute
    assert '<a href="00004_llama3_1_8binstruct/">' in page
    assert '<a class="log" href="00004_llama3_1_8binstruct/job_4243.out">job_4243.out</a>' in page
    assert str(tmp_path) not in page
    assert "Device count 2 is less than 8" in page
    # eval scores coloured against their thresholds: gsm8k passes, mmlu does not
    scores = re.findall(r'<tr class="score (\w*)"><td>eval_gsm8k_mmlu</td><td>(\w+)</td>', page)
    assert scores == [("ok", "gsm8k"), ("bad", "mmlu")]
    # the chart: one bar per bench job in each panel, the larger value the longer bar
    svg = page[page.index("<svg") : page.index("</svg>")]
    widths = [float(w) for w in re.findall(r'class="bar bar-0"[^>]*width="([\d.]+)"', svg)]
    assert widths == [pytest.approx(360 * 1600 / 2688.5, abs=0.1), 360.0]
    assert "Mean request latency (ms)" in svg and "bench_llama_tp2" in svg
    # no network, no script
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page


def test_hostile_test_ids_and_messages_are_escaped(tmp_path: Path) -> None:
    work = tmp_path / "job"
    work.mkdir()
    v = _verdict(
        work,
        "FAILED",
        reason=HOSTILE_MSG,
        evidence=[HOSTILE],
        tests={
            "source": "<b>j</b>",
            "passed": 0,
            "failed": 1,
            "errors": 0,
            "skipped": 1,
            "failing": [{"id": HOSTILE, "message": HOSTILE_MSG}],
            "skipped_tests": [{"id": HOSTILE, "message": HOSTILE_MSG}],
        },
        results={
            "<task>": {"accuracy": 1.0},
            "bench": {"total_output_throughput_tokens_per_sec": 5.0},
        },
    )
    (work / "verdict.json").write_text(json.dumps(v))
    page = render_report(load_report(work))
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert page.count("</svg>") == 1  # only the chart's own end tag
    for text in (HOSTILE, HOSTILE_MSG):
        shown = html.escape(text, quote=True).replace("&#x27;", "&#39;").replace("&quot;", "&#34;")
        assert shown in page, text  # whole, every <, >, &, quote escaped
        assert html.unescape(shown) == text
    assert "&lt;task&gt;" in page


def test_the_same_folder_gives_the_same_bytes(tmp_path: Path) -> None:
    a = make_batch(tmp_path / "a")
    first = write_report(a).read_bytes()
    assert write_report(a).read_bytes() == first
    b = make_batch(tmp_path / "other" / "a")
    assert write_report(b).read_bytes() == first  # where the batch lies does not show


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_report_prints_the_path_and_refuses_a_folder_without_verdicts(tmp_path: Path) -> None:
    root = make_batch(tmp_path / "batch")
    res = _cli("report", str(root))
    assert (res.returncode, res.stdout, res.stderr) == (0, f"{root / 'report.html'}\n", "")
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _cli("report", str(empty))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (
        f"error: dir: {empty} has no verdict.json, job_spec.json or jobs.json; give a job folder "
        "that `build` wrote, or a batch folder that `build-many` wrote\n"
    )
    assert not (empty / "report.html").exists()
    (empty / "verdict.json").write_text("{not json")
    res = _cli("report", str(empty))
    assert res.returncode == 2 and res.stderr.startswith(
        f"error: dir: {empty / 'verdict.json'} cannot be read as JSON ("
    )
    assert not (empty / "report.html").exists()


def test_a_job_folder_report_has_its_one_job(tmp_path: Path) -> None:
    root = make_batch(tmp_path / "batch")
    page = write_report(root / "00004_llama3_1_8binstruct").read_text()
    assert re.findall(r'<tr class="job v-(\w+)"', page) == ["FAILED"]
    assert '<a class="log" href="job_4243.out">' in page


def test_every_verdict_of_watch_has_its_own_status_and_colour() -> None:
    import trtllm_script_builder.render as render_pkg
    from trtllm_script_builder.output.report_html import STATUSES
    from trtllm_script_builder.process.verdict import Verdict

    assert {v.value for v in Verdict} <= set(STATUSES)  # COMPILE_FAILED was shown as FAILED
    css = (Path(render_pkg.__file__).parent / "templates" / "report.html.j2").read_text()
    assert all(f'("{s}", ' in css for s in STATUSES)


def test_a_remote_compile_chains_commit_is_shown(tmp_path: Path) -> None:
    root = make_batch(tmp_path / "batch")
    job = root / "00004_llama3_1_8binstruct"
    verdict = json.loads((job / "verdict.json").read_text())
    commit = "4b1f0c2a9d3e6f0a1c4b2d9e8f7a6b5c4d3e2f1a"
    (job / "verdict.json").write_text(json.dumps({**verdict, "source_commit": commit}))
    page = write_report(job).read_text()
    assert f'<div class="entry" title="{commit}">at 4b1f0c2a9d3e</div>' in page


# ---------------------------------------------------------------- in a real browser


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("TSB_REQUIRE_CHROMIUM") == "1":
        pytest.fail("TSB_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)")
    if found is None:
        pytest.skip(
            "chromium is not installed (apt-get install chromium); set TSB_REQUIRE_CHROMIUM=1 to fail instead"
        )
    return found


def _browse(chromium: str, page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--proxy-server=127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-extensions",
            "--hide-scrollbars",
            f"--user-data-dir={tmp / 'profile'}",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "HOME": str(tmp)},
    )


def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    assert chromium
    root = make_batch(tmp_path / "nightly_sanity")
    page = write_report(root)
    dom = _browse(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert len(re.findall(r'<tr class="job v-\w+"', text)) == 9
    assert '<svg id="bench-chart"' in text and text.count('class="bar bar-') == 4
    assert 'class="pill v-FAILED"' in text
    shot = tmp_path / "shot.png"
    res = _browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2250")
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    if os.environ.get("UPDATE_DOCS") == "1":
        shutil.copy(shot, ROOT / "docs" / "report-example.png")


def test_perf_sanity_cases_show_pass_or_fail_and_their_figures(tmp_path: Path) -> None:
    from tests.test_perf_sanity_results import _run
    from trtllm_script_builder.process.handles import read_local
    from trtllm_script_builder.process.perf_sanity import read_perf_sanity

    work = tmp_path / "perf"
    work.mkdir()
    _run(work)
    group, _, _ = read_perf_sanity(read_local, str(work))
    (work / "verdict.json").write_text(
        json.dumps(_verdict(work, "PASSED", results={"perf_sanity": group}))
    )
    page = write_report(work).read_text()
    rows = re.findall(r'<tr class="case (\w+)"><td>perf</td><td><code>([\w-]+)</code>', page)
    assert rows == [("ok", "aggr-tiny_cfg-tiny_tp2")] * 2 + [("bad", "aggr-tiny_cfg-tiny_tp4")]
    assert "token_throughput 1,590.41" in page
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert svg.count('class="bar bar-0"') == 3 and svg.count('class="bar bar-1"') == 2


@pytest.mark.parametrize("width", [1280, 1920])
def test_a_failed_builds_row_wraps_within_the_page(tmp_path: Path, width: int) -> None:
    """A test id has no spaces and an error line is long: the row wraps, its error in view."""
    chromium = _chromium()
    assert chromium
    root = tmp_path / "batch"
    root.mkdir()
    entry = "accuracy/test_llm_api_pytorch.py::TestVeryLongModelName::test_" + "x_" * 120 + "[tp4]"
    error = "error: test_cmd: " + "the test file was not found under the checkout " * 8 + "; fix"
    rows = [{"line": 3, "entry": entry, "status": "error", "error": error}]
    (root / "jobs.json").write_text(json.dumps(rows))
    page = write_report(root)
    # The page allows no script; a copy measures itself where the report is read.
    probe = """<script>
const w = document.documentElement.clientWidth;
const out = [...document.querySelectorAll('tr.job td, .reason')]
  .filter(e => e.getBoundingClientRect().right > w + 1).length;
document.body.setAttribute('data-overflow', `${out} ${document.documentElement.scrollWidth} ${w}`);
</script></body>"""
    text = page.read_text()
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    measured = tmp_path / "measured.html"
    measured.write_text(text.replace("</body>", probe))
    dom = _browse(chromium, measured, tmp_path, "--dump-dom", f"--window-size={width},900")
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'data-overflow="(\d+) (\d+) (\d+)"', dom.stdout)
    assert m, dom.stdout[-2000:]
    outside, scroll_width, view = map(int, m.groups())
    assert outside == 0 and scroll_width <= view, m.groups()
    assert "the test file was not found" in dom.stdout


def test_a_built_job_not_yet_run_is_shown_as_built_not_submitted(tmp_path: Path) -> None:
    work = tmp_path / "job"
    r = _cli(
        "build", str(ROOT / "examples/requests/pytest_local_slurm.yaml"), "--work-dir", str(work)
    )
    assert r.returncode == 0, r.stderr
    res = _cli("report", str(work))
    assert res.returncode == 0, res.stderr
    page = (work / "report.html").read_text()
    assert re.findall(r'<tr class="job v-(\w+)"', page) == ["NOT_SUBMITTED"]
    assert "built, not submitted yet (trtllm-script-builder submit &lt;its folder&gt;)" in page
    (work / "submission.json").write_text("{}")  # submitted, not watched yet
    page = write_report(work).read_text()
    assert re.findall(r'<tr class="job v-(\w+)"', page) == ["NOT_WATCHED"]
