"""Every pattern run over a job's log reads a line in time linear in its length: a hostile line
four times longer may take about four times as long, never sixteen (decision
linear-log-patterns). Timed as a ratio against the same work on a quarter of the line, the best
of five runs each, short and long taken in turn, in this thread's CPU time: another process
keeping the machine busy stretches wall time, not the work this thread does."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from trtllm_script_builder.process.figures import figures
from trtllm_script_builder.process.junit import summary_report
from trtllm_script_builder.process.perf_sanity import benchmark_figures
from trtllm_script_builder.process.verdict import LogLine, decide_verdict


class _Spec:
    success_patterns = ("PASSED",)
    failure_patterns = ("Traceback",)


def _judge(line: str) -> None:
    lines = [LogLine(line, "job.out", 1)]
    decide_verdict("FAILED", 1, lines, _Spec(), pytest=True)
    decide_verdict(None, 0, lines, _Spec(), pytest=True)
    figures([line])
    summary_report([line])
    benchmark_figures(line)


def _once(work: Callable[[str], None], line: str) -> float:
    start = time.thread_time()
    work(line)
    return time.thread_time() - start


def _pair(work: Callable[[str], None], short: str, long: str) -> tuple[float, float]:
    """The best of five times of the short and the long line, measured in turn."""
    small = big = float("inf")
    for _ in range(5):
        small = min(small, _once(work, short))
        big = min(big, _once(work, long))
    return small, big


# Each unit repeated to fill a line: the shapes that made a backtracking pattern read the line
# once per place it could start.
HOSTILE = [
    "pyxis: ",
    "spank: ",
    "spank_pyxis.so: ",
    "enroot ",
    "enroot-.",
    "srun: error: ",
    "srun: error: launch ",
    "hooks.d/",
    "lm-eval x",
    " Reference x: 1",
    " Higher is better: True",
    "Throughput (",
    "a Throughput (x): 1",
    "= ",
]


@pytest.mark.parametrize("unit", HOSTILE)
def test_a_hostile_line_is_read_in_linear_time(unit: str) -> None:
    short = unit * (8_000 // len(unit))
    long = unit * (32_000 // len(unit))
    small, big = _pair(_judge, short, long)
    # linear: about 4x; the quadratic patterns this replaced took 15-17x
    assert big < 8 * small + 0.05, (unit, small, big)


def test_a_summary_line_ending_in_a_run_of_equals_is_linear() -> None:
    def summary(line: str) -> None:
        summary_report([line])

    short = "1 passed in 1s " + "=" * 8_000 + "x"
    long = "1 passed in 1s " + "=" * 32_000 + "x"
    small, big = _pair(summary, short, long)
    assert big < 8 * small + 0.05, (small, big)


def test_a_128_kb_line_of_pyxis_is_judged_in_a_second() -> None:
    # a generous bound: the quadratic pattern took minutes on this line
    start = time.thread_time()
    _judge("pyxis: " * (128 * 1024 // 7))
    assert time.thread_time() - start < 5.0


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: pyxis: couldn't start container",
        "spank: required plugin spank_pyxis.so: task_init() failed with rc=-1",
        "enroot-mount: failed to mount: /data at /tmp/x",
        "[ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1",
        "srun: error: Task launch for StepId=12.0 failed on node gpunode",
        "srun: error: gpunode: task 0: Node failure",
    ],
)
def test_the_rewritten_signatures_still_find_their_lines(line: str) -> None:
    assert decide_verdict("FAILED", 1, [line], _Spec()).verdict.value == "INFRA_FAILURE"


@pytest.mark.parametrize(
    "line",
    [
        "hooks.d/ exited with return code 1",  # no hook named
        "/etc/enroot/hooks.d/x ran; y exited with return code 1",  # the hook did not exit
        "srun: error: failed to launch",  # `failed` before `launch`
        "pyxis: importing docker image",
    ],
)
def test_near_misses_are_not_infrastructure(line: str) -> None:
    assert decide_verdict("FAILED", 1, [line], _Spec()).verdict.value == "FAILED"
