"""The verdict logic (runner/verdict.py): pure, no cluster needed."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from trtllm_script_builder.process.junit import parse_junit
from trtllm_script_builder.process.probe.parse import parse_kv
from trtllm_script_builder.process.slurm import sacct_rows, status_from_scontrol
from trtllm_script_builder.process.verdict import (
    VERDICT_EXIT,
    Kind,
    LogLine,
    Verdict,
    classify,
    decide_verdict,
)
from trtllm_script_builder.resolve.workflow import workflow


@dataclass
class Spec:
    success_patterns: list[str] = field(default_factory=list)
    failure_patterns: list[str] = field(default_factory=list)


PYTEST = Spec(*workflow("pytest").patterns)
CUSTOM = Spec(*workflow("custom").patterns)
BENCH = Spec(*workflow("bench").patterns)

# What a builder-written custom job prints around the program's own output.
CUSTOM_FRAME_START = ["Job 42 started on gpunode: 1 node(s), 1 task(s)"]
CUSTOM_FRAME_END = [
    "0: Rank0 Custom command finished with exit code {rc}",
    "Job 42 finished with exit code {rc}",
]


def custom_log(body: list[str], rc: int) -> list[str]:
    return CUSTOM_FRAME_START + body + [ln.format(rc=rc) for ln in CUSTOM_FRAME_END]


def decide(state: str | None, rc: int | None, lines: list[str], spec: Spec = PYTEST, **kw: object):  # type: ignore[no-untyped-def]
    return decide_verdict(state, rc, lines, spec, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- exit codes


def test_exit_codes_are_distinct_and_only_passed_is_zero() -> None:
    codes = list(VERDICT_EXIT.values())
    assert len(set(codes)) == len(Verdict) == len(codes)
    assert [v for v, c in VERDICT_EXIT.items() if c == 0] == [Verdict.PASSED]
    assert not {2, 3} & set(codes)  # the CLI's usage and tool-failure statuses
    assert Verdict.HANG_DETECTED.exit_code == 14


# ---------------------------------------------------------------- state and exit code first


def test_completed_exit_0_passes_with_the_success_lines_as_evidence() -> None:
    d = decide("COMPLETED", 0, ["collected 1 item", "0: ===== 1 passed in 0.12s ====="])
    assert d.verdict is Verdict.PASSED
    assert d.evidence[0] == "Slurm state COMPLETED, exit code 0"
    assert "===== 1 passed in 0.12s =====" in d.evidence[1]


def test_exit_0_without_a_success_pattern_still_passes() -> None:
    d = decide("COMPLETED", 0, ["nothing to see"])
    assert d.verdict is Verdict.PASSED
    assert "no success pattern" in d.reason


def test_exit_0_with_a_failure_pattern_in_the_program_output_fails() -> None:
    d = decide("COMPLETED", 0, ["0: tests/a.py::test_x FAILED", "0: 1 passed"])
    assert d.verdict is Verdict.FAILED
    assert any("test_x FAILED" in e for e in d.evidence)


def test_nonzero_exit_fails_with_the_failure_lines() -> None:
    d = decide("FAILED", 1, ["0: E   AssertionError", "0: FAILED tests/a.py::test_x", "rest"])
    assert (d.verdict, d.exit_code, d.exit_status) == (Verdict.FAILED, 1, 1)
    assert any("FAILED tests/a.py::test_x" in e for e in d.evidence)


def test_nonzero_exit_without_patterns_fails_with_the_tail() -> None:
    d = decide("FAILED", 3, custom_log(["0: something went wrong"], 3), CUSTOM)
    assert d.verdict is Verdict.FAILED
    assert d.reason == "exit code 3"
    assert d.evidence == ["Slurm state FAILED, exit code 3", "0: something went wrong"[3:]]


def test_patterns_are_case_sensitive_as_written_in_job_spec() -> None:
    d = decide("COMPLETED", 0, custom_log(["0: no error here, errors=0"], 0), CUSTOM)
    assert d.verdict is Verdict.PASSED


def test_custom_success_line_is_evidence_but_the_exit_code_decides() -> None:
    d = decide("COMPLETED", 0, custom_log(["0: hello"], 0), CUSTOM)
    assert d.verdict is Verdict.PASSED
    assert d.evidence[-1] == "Rank0 Custom command finished with exit code 0"


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        ("TIMEOUT", Verdict.TIMEOUT),
        ("DEADLINE", Verdict.TIMEOUT),
        ("CANCELLED", Verdict.CANCELLED),
        ("CANCELLED by 0", Verdict.CANCELLED),
        ("OUT_OF_MEMORY", Verdict.OUT_OF_MEMORY),
        ("NODE_FAIL", Verdict.INFRA_FAILURE),
        ("BOOT_FAIL", Verdict.INFRA_FAILURE),
        ("PREEMPTED", Verdict.INFRA_FAILURE),
    ],
)
def test_slurm_states_decide_before_the_log(state: str, verdict: Verdict) -> None:
    # the log says "passed" and holds a failure pattern: neither matters
    d = decide(state, 0, ["0: 3 passed", "0: ERROR something"])
    assert d.verdict is verdict
    assert d.state == state.split()[0]
    assert d.evidence[0].startswith(f"Slurm state {state.split()[0]}")


def test_slurm_timeout_quotes_slurmstepd() -> None:
    line = "slurmstepd: error: *** JOB 7 ON gpunode CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***"
    d = decide("TIMEOUT", 0, ["0: working", line], signal=15)
    assert d.verdict is Verdict.TIMEOUT
    assert d.evidence == ["Slurm state TIMEOUT, exit code 0 (signal 15)", line]


def test_oom_kill_reported_by_slurmstepd_on_a_failed_job() -> None:
    line = "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks have been OOM Killed."
    d = decide("FAILED", 137, ["0: allocating", line])
    assert d.verdict is Verdict.OUT_OF_MEMORY
    assert line in d.evidence


def test_watch_timeout() -> None:
    d = decide(None, None, ["0: step 1", "0: step 2"], timed_out=True)
    assert d.verdict is Verdict.TIMEOUT
    assert d.exit_status == 11


# ---------------------------------------------------------------- hang


@pytest.mark.parametrize("text", ["hang detected", "HANG DETECTED after 600s", "Hang Detected!"])
def test_hang_detected_any_case(text: str) -> None:
    d = decide("CANCELLED", 0, ["0: working", f"0: [watchdog] {text}", "0: more"])
    assert d.verdict is Verdict.HANG_DETECTED
    assert any(text in e for e in d.evidence)


def test_hang_wins_over_a_watch_timeout_and_a_pass() -> None:
    assert decide(None, None, ["hang detected"], timed_out=True).verdict is Verdict.HANG_DETECTED
    assert decide("COMPLETED", 0, ["1 passed", "hang detected"]).verdict is Verdict.HANG_DETECTED


# ---------------------------------------------------------------- what must never decide


def test_set_x_traces_never_decide() -> None:
    lines = [
        "+ echo 'hang detected'",
        "++ grep -c FAILED log",
        "0: + trap 'echo \"Error: ERROR FAILED Traceback\"' ERR",
        "+ pyxis: couldn't start container",
        "+++ srun: error: Task launch for StepId=1.0 failed on node x",
        "0: 1 passed",
    ]
    d = decide("COMPLETED", 0, lines)
    assert d.verdict is Verdict.PASSED
    assert all(k is Kind.TRACE for k, _ in classify(lines[:5]))
    assert not any("+ " in e for e in d.evidence)


def test_the_builders_own_lines_never_decide() -> None:
    own = [
        "Job 42 started on gpunode: 1 node(s), 1 task(s)",
        "0: [node 0] installing TensorRT-LLM from /repo",
        "0: [node 0] install done",
        "slurm_run_custom.sh: line 24: command failed: echo 'Error hang detected'",
        "0: Rank0 Custom command finished with exit code 0",
        "warning: nvidia-smi failed on gpunode",
        "Job 42 finished with exit code 0",
    ]
    assert {k for k, _ in classify(own)} == {Kind.OWN}
    d = decide("COMPLETED", 0, own, Spec(["finished"], ["Error", "failed", "install"]))
    assert d.verdict is Verdict.PASSED
    # a failing job: the builder's "finished with exit code 1" is not the evidence
    d = decide("FAILED", 1, custom_log(["0: Traceback (most recent call last):"], 1), CUSTOM)
    assert d.verdict is Verdict.FAILED
    assert not any("finished with exit code" in e for e in d.evidence)
    assert "Traceback (most recent call last):" in d.evidence[1]


def test_install_output_is_not_the_programs_output() -> None:
    install = [
        "0: [node 0] installing TensorRT-LLM from /repo",
        "0: ERROR: pip's dependency resolver does not currently take into account all the packages",
        "0: ERROR something in setup",
        "0: [node 0] install done",
    ]
    d = decide("COMPLETED", 0, [*install, "0: 1 passed"])
    assert d.verdict is Verdict.PASSED
    # the install failed (no "install done"): the job fails and its lines are the evidence
    d = decide("FAILED", 1, install[:3])
    assert d.verdict is Verdict.FAILED
    assert any("ERROR something in setup" in e for e in d.evidence)


def test_pip_noise_in_a_docker_log_does_not_fail_a_pass() -> None:
    lines = [
        "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.",
        "TensorRT-LLM 1.2.0",
        "1 passed in 3.2s",
    ]
    assert decide(None, 0, lines).verdict is Verdict.PASSED


def test_slurm_lines_are_not_program_output() -> None:
    lines = ["0: 1 passed", "srun: error: gpunode: task 0: Exited with exit code 0 ERROR"]
    assert decide("COMPLETED", 0, lines).verdict is Verdict.PASSED


# ---------------------------------------------------------------- infrastructure


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: pyxis: couldn't start container",
        "slurmstepd: error: pyxis: --container-mounts: mount source /x does not exist (pyxis refuses it)",
        "pyxis: failed to import docker image",
        "slurmstepd: error: pyxis:     [ERROR] No such file or directory: /lustre/img.sqsh",
        "[ERROR] No such file or directory: /usr/share/enroot/hooks.d",
        "enroot-mount: failed to mount: /data at /tmp/x: No such file or directory",
        "[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1",
        "srun: error: Task launch for StepId=12.0 failed on node gpunode: Invalid job credential",
        "srun: error: Application launch failed: Invalid job credential",
        "srun: error: Unable to create step for job 12: Job/step already completing or completed",
        "spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
        "slurmstepd: error: *** JOB 12 ON gpunode CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***",
        "docker: Error response from daemon: could not select device driver with capabilities: [[gpu]].",
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    ],
)
def test_container_and_launch_failures_are_infra(line: str) -> None:
    d = decide("FAILED", 1, [line, "0: FAILED test"])
    assert d.verdict is Verdict.INFRA_FAILURE, d
    assert line.strip() in "\n".join(d.evidence)


def test_pyxis_progress_lines_are_not_failures() -> None:
    info = [
        "pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.01-py3",
        "pyxis: imported docker image",
    ]
    assert decide("COMPLETED", 0, [*info, "0: 1 passed"]).verdict is Verdict.PASSED
    assert decide("FAILED", 1, [*info, "0: FAILED x"]).verdict is Verdict.FAILED


def test_infra_lines_do_not_turn_a_pass_into_a_failure() -> None:
    lines = ["pyxis: failed to import docker image (retrying)", "0: 1 passed"]
    assert decide("COMPLETED", 0, lines).verdict is Verdict.PASSED


def test_trtllm_logger_error_tag_is_not_enroot() -> None:
    d = decide("FAILED", 1, ["[TensorRT-LLM][ERROR] CUDA error: out of range"])
    assert d.verdict is Verdict.FAILED


# ---------------------------------------------------------------- Docker and local processes


@pytest.mark.parametrize(
    ("rc", "verdict"),
    [
        (0, Verdict.PASSED),
        (1, Verdict.FAILED),
        (125, Verdict.INFRA_FAILURE),
        (143, Verdict.CANCELLED),
        (130, Verdict.CANCELLED),
        (None, Verdict.FAILED),
    ],
)
def test_docker_exit_codes(rc: int | None, verdict: Verdict) -> None:
    d = decide(None, rc, ["some output"], BENCH)
    assert d.verdict is verdict
    assert d.state is None
    assert d.evidence[0] == f"exit code {'unknown' if rc is None else rc}"


def test_docker_bench_failure_pattern_with_exit_0() -> None:
    d = decide(None, 0, ["Traceback (most recent call last):", "Throughput: 10 tokens/sec"], BENCH)
    assert d.verdict is Verdict.FAILED


def test_log_lines_carry_their_file_and_line() -> None:
    lines = [LogLine("0: FAILED t", "job_1.out", 7)]
    d = decide("FAILED", 1, lines)  # type: ignore[arg-type]
    assert d.evidence[1] == "job_1.out:7: FAILED t"


# ---------------------------------------------------------------- Slurm output parsing


SCONTROL = (
    "JobId=110 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Account=tsb QOS=normal "
    "JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15 RunTime=00:01:19 "
    "TimeLimit=00:01:00 NodeList=cpunode AllocNode:Sid=localhost:24607 "
    "WorkDir=/tmp/a b StdErr=/tmp/a b/q_110.err StdIn=/dev/null StdOut=/tmp/a b/q_110.out Power="
)


def test_scontrol_job_line() -> None:
    f = parse_kv(SCONTROL)
    assert f["StdOut"] == "/tmp/a b/q_110.out" and f["AllocNode:Sid"] == "localhost:24607"
    st = status_from_scontrol("110", SCONTROL)
    assert (st.state, st.exit_code, st.signal, st.terminal) == ("TIMEOUT", 0, 15, True)
    assert (st.stdout, st.stderr, st.time_left) == (
        "/tmp/a b/q_110.out",
        "/tmp/a b/q_110.err",
        "00:00:00",
    )
    running = status_from_scontrol(
        "5", "JobId=5 JobState=RUNNING ExitCode=0:0 RunTime=00:00:10 TimeLimit=00:05:00"
    )
    assert (running.terminal, running.time_left) == (False, "00:04:50")


def test_sacct_row() -> None:
    st = sacct_rows("9|CANCELLED by 0|0:15|00:00:03|gpunode\n")["9"]
    assert (st.state, st.exit_code, st.signal, st.terminal) == ("CANCELLED", 0, 15, True)
    assert sacct_rows("") == {}


# ---------------------------------------------------------------- pytest: NOT_RUN and JUnit

ALL_SKIPPED = b"""<testsuites><testsuite tests="1" skipped="1">
<testcase classname="accuracy.test_tiny.TestTiny" name="test_eight_gpus[tp8]">
<skipped type="pytest.skip" message="Device count 2 is less than 8">...</skipped>
</testcase></testsuite></testsuites>"""
ONE_FAILS = b"""<testsuite><testcase classname="accuracy.test_tiny.TestTiny" name="test_ok"/>
<testcase classname="accuracy.test_tiny.TestBroken" name="test_asserts_false">
<failure message="AssertionError: this test fails on purpose">...</failure></testcase>
</testsuite>"""


def test_all_skipped_by_junit_is_not_run_with_the_skip_reason() -> None:
    tests = parse_junit(ALL_SKIPPED, "tiny_auto_test_42_junit.xml")
    lines = ["collected 1 item", "============ 1 skipped in 0.01s ============"]
    d = decide("COMPLETED", 0, lines, pytest=True, tests=tests)
    assert d.verdict is Verdict.NOT_RUN and d.exit_status == 15
    assert d.reason == "no test passed (1 skipped; tiny_auto_test_42_junit.xml)"
    assert d.evidence == [
        "Slurm state COMPLETED, exit code 0",
        "skipped accuracy/test_tiny.py::TestTiny::test_eight_gpus[tp8]: "
        "Device count 2 is less than 8",
    ]
    assert d.tests is tests


@pytest.mark.parametrize(
    ("lines", "rc"),
    [
        (["accuracy/test_x.py::TestX::test_a SKIPPED (needs 8 GPUs)", "=== 1 skipped in 0.1s ==="], 0),
        (["=================== no tests ran in 0.01s ==================="], 5),
        (["collected 3 items / 3 deselected", "=== 3 deselected in 0.02s ==="], 5),
        (["ERROR: not found: /repo/tests/test_x.py::nope"], 5),  # no summary: exit 5 alone
    ],
)  # fmt: skip
def test_no_test_passed_by_the_summary_line_or_exit_5_is_not_run(lines: list[str], rc: int) -> None:
    d = decide("COMPLETED" if rc == 0 else "FAILED", rc, lines, pytest=True)
    assert d.verdict is Verdict.NOT_RUN, d
    if "SKIPPED" in lines[0]:
        assert d.evidence[1:] == [lines[0], lines[1]]
        assert d.tests is not None and d.tests.skipped == 1


def test_not_run_is_for_pytest_jobs_only() -> None:
    assert decide("COMPLETED", 0, ["=== 1 skipped in 0.1s ==="], CUSTOM).verdict is Verdict.PASSED
    assert decide("FAILED", 5, ["no tests ran in 0.1s"], CUSTOM).verdict is Verdict.FAILED


def test_a_passing_test_beside_skipped_ones_passes() -> None:
    d = decide("COMPLETED", 0, ["=== 1 passed, 1 skipped in 0.1s ==="], pytest=True)
    assert d.verdict is Verdict.PASSED and d.tests is not None and d.tests.passed == 1


def test_the_cluster_verdicts_stand_over_the_junit_report() -> None:
    tests = parse_junit(ALL_SKIPPED)
    assert decide("TIMEOUT", None, [], pytest=True, tests=tests).verdict is Verdict.TIMEOUT
    assert decide("CANCELLED", None, [], pytest=True, tests=tests).verdict is Verdict.CANCELLED
    hang = decide("COMPLETED", 0, ["hang detected"], pytest=True, tests=tests)
    assert hang.verdict is Verdict.HANG_DETECTED
    # a job that died first (exit 1, no report): the existing rules
    assert decide("FAILED", 1, ["Traceback"], pytest=True).verdict is Verdict.FAILED


def test_a_failing_test_is_named_with_its_message() -> None:
    tests = parse_junit(ONE_FAILS, "r.xml")
    lines = ["FAILED accuracy/test_tiny.py::TestBroken::test_asserts_false", "=== 1 failed, 1 passed in 0.1s ==="]  # fmt: skip
    d = decide("FAILED", 1, lines, pytest=True, tests=tests)
    assert d.verdict is Verdict.FAILED
    assert d.evidence[1] == (
        "failed accuracy/test_tiny.py::TestBroken::test_asserts_false: "
        "AssertionError: this test fails on purpose"
    )
    assert d.evidence[2].endswith("FAILED accuracy/test_tiny.py::TestBroken::test_asserts_false")
    # exit 0 cannot hide a failure the report holds
    d = decide("COMPLETED", 0, [], pytest=True, tests=tests)
    assert d.verdict is Verdict.FAILED and "report has failing tests" in d.reason


def test_eval_and_bench_figures_ride_on_the_decision() -> None:
    d = decide("COMPLETED", 0, ["0: [TRT-LLM] [I] lm-eval gsm8k average accuracy: 75.00"])
    assert d.results == {"gsm8k": {"accuracy": 75.0}}
    d = decide("COMPLETED", 0, ["+ echo Request Throughput (req/sec): 9"])  # a trace, not output
    assert d.results == {}
