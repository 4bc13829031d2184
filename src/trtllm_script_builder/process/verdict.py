"""The verdict on a finished (or stopped) job: pure functions, no processes, no files.

`decide_verdict(state, exit_code, log_lines, spec)` looks at, in this order:

1. `hang detected` (any case) in a line the job's programs printed -> HANG_DETECTED;
2. the watcher's own deadline (`timed_out=True`) -> TIMEOUT;
3. the Slurm state: TIMEOUT/DEADLINE -> TIMEOUT, OUT_OF_MEMORY -> OUT_OF_MEMORY,
   CANCELLED -> CANCELLED, NODE_FAIL/BOOT_FAIL/PREEMPTED/LAUNCH_FAILED/REVOKED -> INFRA_FAILURE;
4. exit code 0 (state COMPLETED, or no Slurm state for Docker and persistent runs) -> PASSED,
   unless a failure pattern of the job_spec is in the program's own output -> FAILED;
5. any other exit: a container/launch failure signature (pyxis, enroot, srun launch, docker
   daemon) -> INFRA_FAILURE; an oom-kill report -> OUT_OF_MEMORY; else FAILED.
6. a pytest job judged PASSED or FAILED by 4-5: no test passed and none failed (JUnit report, or
   pytest's summary line without one) at exit 0 or 5, or exit 5 alone -> NOT_RUN; failing tests
   in the JUnit report -> FAILED, naming them (decision verdict-rules).

A job with a compile or image import chain is judged by process/chain.py first: a failed
compile is COMPILE_FAILED (decision compile-chain), and the test job's own verdict is never reached.

Lines are classified first, so only what the job's programs printed can decide a pattern:
`set -x` traces (`+ ...`), the builder's own echo lines ("Job N started on", "Job N finished
with exit code", "[node N] installing/install done", the run script's trap and "RankN Custom
command finished" lines) never match a pattern; the install step's output (between the
install lines) is setup, not the program; lines from srun/slurmstepd are Slurm's and only
feed the infrastructure and memory checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process.figures import figures
from trtllm_script_builder.process.junit import TestReport, summary_report


class Verdict(str, Enum):
    PASSED = "PASSED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    HANG_DETECTED = "HANG_DETECTED"
    INFRA_FAILURE = "INFRA_FAILURE"
    NOT_RUN = "NOT_RUN"
    COMPILE_FAILED = "COMPILE_FAILED"

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self]


# Exit status of `watch` / `run` per verdict (2 and 3 are the CLI's usage and tool errors).
VERDICT_EXIT: dict[Verdict, int] = {
    Verdict.PASSED: 0,
    Verdict.FAILED: 1,
    Verdict.INFRA_FAILURE: 10,
    Verdict.TIMEOUT: 11,
    Verdict.CANCELLED: 12,
    Verdict.OUT_OF_MEMORY: 13,
    Verdict.HANG_DETECTED: 14,
    Verdict.NOT_RUN: 15,
    Verdict.COMPILE_FAILED: 16,  # the chain's compile job failed; the test job never ran
}

HANG_TEXT = "hang detected"
SLURM_TIMEOUT_STATES = {"TIMEOUT", "DEADLINE"}
SLURM_INFRA_STATES = {"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "LAUNCH_FAILED", "REVOKED"}
SLURM_OOM_STATES = {"OUT_OF_MEMORY"}
SLURM_CANCELLED_STATES = {"CANCELLED"}
# exit statuses of a process killed by SIGINT / SIGTERM (Docker, persistent runs)
SIGNAL_CANCEL_EXITS = {130, 143}
DOCKER_RUN_FAILED = 125  # `docker run` itself failed (daemon, image, options)
PYTEST_NO_TESTS = 5  # pytest's exit status when no test was collected or selected

MAX_EVIDENCE = 12


class Patterns(Protocol):
    @property
    def success_patterns(self) -> Sequence[str]: ...

    @property
    def failure_patterns(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class LogLine:
    """One line of a job log; `source` names the file (for evidence), `lineno` counts from 1."""

    text: str
    source: str = ""
    lineno: int = 0

    def show(self) -> str:
        """The line as evidence: control characters escaped, cut short
        (decision shown-never-obeyed)."""
        where = f"{self.source}:{self.lineno}: " if self.source else ""
        return printable(f"{where}{self.text}")


# ---------------------------------------------------------------- classifying lines

# `srun -l` puts "N: " (or "  N: ") before every task line.
_LABEL = re.compile(r"^\s*\d+: ")
_TRACE = re.compile(r"^\++(\s|$)")
_BUILDER = [
    re.compile(r"^Job \S+ started on \S*: \d+ node\(s\), \d+ task\(s\)$"),
    re.compile(r"^Job \S+ finished with exit code -?\d+$"),
    re.compile(r"^\[node \S+\] installing TensorRT-LLM from "),
    re.compile(r"^\[node \S+\] install done$"),
    re.compile(r"^Rank\S* Custom command finished with exit code -?\d+$"),
    re.compile(r"^slurm_run_custom\.sh: line \d+: command failed: "),
    re.compile(r"^warning: nvidia-smi failed on "),
    re.compile(r"^trap -- "),  # `trap -p` output
]
_INSTALL_START = re.compile(r"^\[node (\S+)\] installing TensorRT-LLM from ")
_INSTALL_END = re.compile(r"^\[node (\S+)\] install done$")
_SLURM = re.compile(r"^(srun|slurmstepd(-[\w.-]+)?|salloc|sbatch|slurmd)(\[\d+\])?: ")
# well-known noise from the install step that must not read as the program's failure
_NOISE = [
    re.compile(r"^(ERROR|WARNING): pip's dependency resolver "),
    re.compile(r"^WARNING: Running pip as the 'root' user"),
]


class _Then:
    """Each part further on in the line than the one before: what `a.*b.*c` finds, in one pass
    over a line a job printed (`.*` inside a search is quadratic in the line's length: a 128 KB
    line of `pyxis: ` took minutes; decision linear-log-patterns)."""

    def __init__(self, *parts: str) -> None:
        self.parts = [re.compile(p, re.I) for p in parts]

    def search(self, text: str) -> bool:
        at = 0
        for part in self.parts:
            m = part.search(text, at)
            if m is None:
                return False
            at = m.end()
        return True


class _Hook:
    """An enroot hook that failed: `<path>/hooks.d/<name> exited with return code N`, the path
    one word; a match starts only where a word starts, so the line is read once."""

    _EXIT = re.compile(r"(?<!\S)(\S+) exited with return code [1-9]")

    def search(self, text: str) -> bool:
        return any("hooks.d/" in m.group(1)[:-1] for m in self._EXIT.finditer(text))


# Container start / launch / node failures (pyxis, enroot, srun, docker): infrastructure.
# Every one runs in time linear in the line's length: the line is another program's words.
INFRA_SIGNATURES: list[re.Pattern[str] | _Then | _Hook] = [
    re.compile(r"error: pyxis: ", re.I),
    _Then(r"pyxis: ", r"couldn't|could not|failed|unable|error"),
    _Then(r"spank(?:_pyxis\.so)?: ", r"failed|error"),
    re.compile(r"^\[ERROR\] "),  # enroot's own error lines, e.g. [ERROR] No such file or directory
    re.compile(r"pyxis:\s+\[ERROR\] "),
    _Then(r"\benroot(?:-[\w.]{1,64})?:? ", r"\bfail"),
    _Hook(),
    _Then(r"srun: error: ", r"launch", r"failed"),
    re.compile(r"srun: error: Unable to create step", re.I),
    _Then(r"srun: error: ", r"Node failure"),
    re.compile(r"DUE TO NODE FAILURE"),
    re.compile(r"^docker: Error response from daemon"),
    re.compile(r"Cannot connect to the Docker daemon"),
    re.compile(r"could not select device driver", re.I),
]
OOM_SIGNATURES: list[re.Pattern[str]] = [
    re.compile(r"oom[-_ ]kill", re.I),
    re.compile(r"Exceeded job memory limit", re.I),
]


class Kind(str, Enum):
    PROGRAM = "program"  # what the job's programs printed: patterns decide here
    SETUP = "setup"  # the install step's output: evidence for failures only
    SLURM = "slurm"  # srun / slurmstepd: infrastructure and memory checks only
    OWN = "own"  # the builder's echo lines: never decide anything
    TRACE = "trace"  # `set -x` lines: never decide anything, never evidence


def strip_label(text: str) -> str:
    return _LABEL.sub("", text.rstrip("\r\n"), count=1)


def classify(lines: Iterable[str | LogLine]) -> list[tuple[Kind, LogLine]]:
    """Sort every line into program / setup / slurm / own (see the module doc)."""
    out: list[tuple[Kind, LogLine]] = []
    installing: set[str] = set()
    for raw in lines:
        line = raw if isinstance(raw, LogLine) else LogLine(raw)
        text = strip_label(line.text)
        kind = Kind.PROGRAM
        if _TRACE.match(text):
            kind = Kind.TRACE
        elif any(p.match(text) for p in _BUILDER):
            kind = Kind.OWN
            if m := _INSTALL_START.match(text):
                installing.add(m.group(1))
            elif m := _INSTALL_END.match(text):
                installing.discard(m.group(1))
        elif _SLURM.match(text):
            kind = Kind.SLURM
        elif installing or any(p.match(text) for p in _NOISE):
            kind = Kind.SETUP
        out.append((kind, LogLine(text, line.source, line.lineno)))
    return out


# ---------------------------------------------------------------- the decision


@dataclass
class Decision:
    verdict: Verdict
    reason: str
    evidence: list[str] = field(default_factory=list)
    state: str | None = None
    exit_code: int | None = None
    tests: TestReport | None = None  # pytest's counts and test ids (JUnit or summary line)
    results: dict[str, Any] = field(default_factory=dict)  # eval / bench figures from the log

    @property
    def exit_status(self) -> int:
        return self.verdict.exit_code


def _matches(line: LogLine, patterns: Sequence[str]) -> bool:
    return any(p and p in line.text for p in patterns)


def _first(lines: list[LogLine], n: int) -> list[str]:
    return [ln.show() for ln in lines[:n]]


def normalise_state(state: str | None) -> str | None:
    """`CANCELLED by 0` -> `CANCELLED`; `None`/empty stays None."""
    if not state:
        return None
    return state.split()[0].rstrip("+").upper()


def decide_verdict(
    state: str | None,
    exit_code: int | None,
    log_lines: Iterable[str | LogLine],
    spec: Patterns,
    *,
    timed_out: bool = False,
    signal: int | None = None,
    pytest: bool = False,
    tests: TestReport | None = None,
) -> Decision:
    """The verdict for a job that ended in `state` (Slurm's; None outside Slurm) with
    `exit_code` (None when unknown), given its log lines and the job_spec's patterns.

    `timed_out` says the watcher's own deadline ran out; `signal` is the signal part of
    Slurm's `ExitCode=N:S`, when known. `pytest` marks a pytest job, whose JUnit report
    `tests` (None when the job wrote none) can turn its PASSED or FAILED into NOT_RUN.
    """
    classified = classify(log_lines)
    decision = _decide(state, exit_code, classified, spec, timed_out, signal)
    program = [ln for k, ln in classified if k is Kind.PROGRAM]
    if pytest:
        decision = _pytest_rules(decision, program, tests)
    decision.results = figures(ln.text for ln in program)
    return decision


def _pytest_rules(decision: Decision, program: list[LogLine], tests: TestReport | None) -> Decision:
    """Exit 0 says pytest did not fail, not that anything was tested: a run where no test
    passed (all skipped, none collected, an empty selection) is NOT_RUN. Only a job that ran
    to pytest's own end is judged here; the cluster's verdicts stand."""
    if decision.verdict not in (Verdict.PASSED, Verdict.FAILED):
        return decision
    where = decision.evidence[:1]
    report, summary = tests, None
    if report is None and (found := summary_report(ln.text for ln in program)):
        report, summary = found[0], program[found[1]]
    decision.tests = report
    code = decision.exit_code
    if report is not None and report.nothing_ran and code in (0, PYTEST_NO_TESTS):
        if summary is None:
            lines = [f"skipped {t.show()}" for t in report.skipped_tests]
        else:
            skips = [ln for ln in program if "SKIPPED" in ln.text and ln is not summary]
            lines = [ln.show() for ln in [*skips[:8], summary]]
        what = f"{report.skipped} skipped" if report.skipped else "none collected or selected"
        reason = f"no test passed ({what}; {report.source or 'JUnit'})"
        return _with(decision, Verdict.NOT_RUN, reason, where + lines)
    if report is None and code == PYTEST_NO_TESTS:
        reason = f"pytest exit code {PYTEST_NO_TESTS}: no test was collected or selected"
        return _with(decision, Verdict.NOT_RUN, reason, where + _tail(program, 5))
    if report is not None and report.failing:
        named = [f"failed {t.show()}" for t in report.failing]
        reason = decision.reason
        if decision.verdict is Verdict.PASSED:
            reason = (
                f"exit code {code}, but the {report.source or 'JUnit'} report has failing tests"
            )
        return _with(decision, Verdict.FAILED, reason, where + named + decision.evidence[1:])
    return decision


def _with(decision: Decision, verdict: Verdict, reason: str, evidence: list[str]) -> Decision:
    return Decision(
        verdict, reason, evidence[:MAX_EVIDENCE], decision.state, decision.exit_code, decision.tests
    )


def _decide(
    state: str | None,
    exit_code: int | None,
    classified: list[tuple[Kind, LogLine]],
    spec: Patterns,
    timed_out: bool,
    signal: int | None,
) -> Decision:
    st = normalise_state(state)
    program = [ln for k, ln in classified if k is Kind.PROGRAM]
    setup = [ln for k, ln in classified if k is Kind.SETUP]
    slurm = [ln for k, ln in classified if k is Kind.SLURM]
    where = _state_line(st, exit_code, signal)

    def decision(verdict: Verdict, reason: str, lines: list[str]) -> Decision:
        evidence = [where, *lines][:MAX_EVIDENCE]
        return Decision(verdict, reason, evidence, st, exit_code)

    hang = [ln for ln in program + setup if HANG_TEXT in ln.text.lower()]
    if hang:
        return decision(Verdict.HANG_DETECTED, f"{HANG_TEXT!r} in the log", _first(hang, 3))
    if timed_out:
        return decision(
            Verdict.TIMEOUT, "the watch timeout ran out before the job ended", _tail(program, 5)
        )
    if st in SLURM_TIMEOUT_STATES:
        lines = [ln for ln in slurm if "TIME LIMIT" in ln.text.upper()] or program[-5:]
        return decision(Verdict.TIMEOUT, f"Slurm state {st}", _first(lines, 5))
    if st in SLURM_OOM_STATES:
        lines = [ln for ln in slurm + program if _oom(ln)]
        return decision(Verdict.OUT_OF_MEMORY, f"Slurm state {st}", _first(lines, 5))
    if st in SLURM_INFRA_STATES:
        lines = [ln for ln in slurm + setup + program if _infra(ln)]
        return decision(Verdict.INFRA_FAILURE, f"Slurm state {st}", _first(lines, 5))
    if st in SLURM_CANCELLED_STATES:
        lines = [ln for ln in slurm if "CANCELLED" in ln.text]
        return decision(Verdict.CANCELLED, f"Slurm state {st}", _first(lines, 3))

    failures = [ln for ln in program if _matches(ln, spec.failure_patterns)]
    # success lines are evidence only (the exit code decides), so the builder's own
    # "RankN Custom command finished with exit code 0" may serve as one
    successes = [
        ln
        for k, ln in classified
        if k in (Kind.PROGRAM, Kind.OWN) and _matches(ln, spec.success_patterns)
    ]
    ok_state = st in (None, "COMPLETED")
    if ok_state and exit_code in (0, None) and not (st is None and exit_code is None):
        if failures:
            return decision(
                Verdict.FAILED,
                "exit code 0, but the program's output holds a failure pattern",
                _first(failures, 8),
            )
        note = "exit code 0" + ("" if successes else " (no success pattern in the output)")
        return decision(Verdict.PASSED, note, _tail(successes, 3))

    # it did not succeed: was it the infrastructure?
    infra = [ln for ln in slurm + setup + program if _infra(ln)]
    if infra:
        return decision(Verdict.INFRA_FAILURE, "container start / launch failure", _first(infra, 6))
    if st is None and exit_code == DOCKER_RUN_FAILED:
        return decision(
            Verdict.INFRA_FAILURE,
            f"docker run exited {DOCKER_RUN_FAILED}: the container did not start",
            _tail(program + setup, 6),
        )
    oom = [ln for ln in slurm if _oom(ln)]
    if oom:
        return decision(Verdict.OUT_OF_MEMORY, "Slurm reported an oom-kill", _first(oom, 4))
    if st is None and exit_code in SIGNAL_CANCEL_EXITS:
        return decision(
            Verdict.CANCELLED, f"exit code {exit_code}: stopped by a signal", _tail(program, 3)
        )
    if failures:
        return decision(Verdict.FAILED, "failure pattern in the output", _first(failures, 8))
    tail = _tail(program, 8) or _tail(setup, 8) or _tail(slurm, 8)
    if exit_code is None:
        return decision(Verdict.FAILED, "the job ended without an exit code", tail)
    sig = f", signal {signal}" if signal else ""
    return decision(Verdict.FAILED, f"exit code {exit_code}{sig}", tail)


def _infra(line: LogLine) -> bool:
    return any(p.search(line.text) for p in INFRA_SIGNATURES)


def _oom(line: LogLine) -> bool:
    return any(p.search(line.text) for p in OOM_SIGNATURES)


def _tail(lines: list[LogLine], n: int) -> list[str]:
    return [ln.show() for ln in lines[-n:]] if n else []


def _state_line(state: str | None, exit_code: int | None, signal: int | None) -> str:
    code = "unknown" if exit_code is None else str(exit_code)
    if signal:
        code += f" (signal {signal})"
    if state is None:
        return f"exit code {code}"
    return f"Slurm state {state}, exit code {code}"
