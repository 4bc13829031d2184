"""Chains (decision compile-chain): the image import and compile jobs a test job waits for. `submit`
starts them first and the test job with `--dependency=afterok:...`; `watch` follows them
first, and a failed compile is the verdict COMPILE_FAILED (the test job never starts).

For a batch of test jobs sharing one compile and one import: call `submit_prerequisites` once
per job with the same `known` dict; a prerequisite whose key is in it is not submitted again,
and `dependency_args` of the returned jobs go on each test job's sbatch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.handles import Reader, SlurmJob
from trtllm_script_builder.process.proc import Runner
from trtllm_script_builder.process.submission import log_path
from trtllm_script_builder.process.verdict import (
    MAX_EVIDENCE,
    Decision,
    Kind,
    LogLine,
    Verdict,
    classify,
    decide_verdict,
)

# (script path, extra sbatch arguments) -> job id; raises ToolFailed when sbatch fails.
Sbatch = Callable[[str, list[str]], str]
# A build step's line: `[ 45%] Building ...` (CMake's Makefiles) or `[180/400] Building ...`
# (Ninja, which TensorRT-LLM's CI builds with).
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")
_STEPS = re.compile(r"^\[(\d{1,7})/(\d{1,7})\] ")


@dataclass
class ChainJob:
    """A submitted prerequisite: what submission.json records for `watch`."""

    kind: str  # "import" or "compile"
    key: str
    job_id: str
    log_file: str | None
    err_file: str | None
    shared: bool = False  # submitted earlier for another job (a batch): not ours to cancel

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None and v is not False}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChainJob:
        """A job of submission.json's (or batch_submission.json's) `prerequisites`."""
        return cls(**{k: v for k, v in data.items() if k in _CHAIN_KEYS})


def dependency_args(jobs: list[ChainJob], *, singleton: bool = False) -> list[str]:
    """sbatch options that start a job only after every job in `jobs` succeeded, and cancel it
    when one of them fails (instead of leaving it pending for ever). `singleton`: also after
    every other job of its name (a compile: the other compiles of its checkout,
    decision one-compile-per-checkout); given here because a --dependency on the command line
    replaces the script's."""
    if not jobs:
        return ["--dependency=singleton"] if singleton else []
    ids = ":".join(j.job_id for j in jobs)
    also = ",singleton" if singleton else ""
    return [f"--dependency=afterok:{ids}{also}", "--kill-on-invalid-dep=yes"]


def submit_prerequisites(
    spec: JobSpec,
    sbatch: Sbatch,
    log_base: str,
    *,
    remote: bool = False,
    known: dict[str, ChainJob] | None = None,
    cancel: Callable[[list[ChainJob]], None] | None = None,
) -> list[ChainJob]:
    """Submit the job_spec's prerequisites in order (the compile waits for the import);
    `log_base` is the folder their log patterns are relative to. A key found in `known` is
    reused instead of submitted; new jobs are added to it. When an sbatch fails, the jobs
    submitted here so far are handed to `cancel` (else the import would run for nothing)
    and leave `known` again, then the error goes on."""
    known = {} if known is None else known
    done: list[ChainJob] = []
    try:
        for entry in spec.prerequisites or []:
            key = entry["key"]
            if key in known:
                done.append(ChainJob(**{**vars(known[key]), "shared": True}))
                continue
            script = entry.get("remote_script_path") if remote else entry["script_path"]
            assert script, "remote job_spec without remote_script_path"
            job_id = sbatch(script, dependency_args(done, singleton=entry["kind"] == "compile"))
            job = ChainJob(
                entry["kind"],
                key,
                job_id,
                log_path(entry.get("log_file_pattern"), job_id, log_base),
                log_path(entry.get("error_file_pattern"), job_id, log_base),
            )
            known[key] = job
            done.append(job)
    except BaseException:
        own = [j for j in done if not j.shared]
        for j in own:
            known.pop(j.key, None)
        if own and cancel is not None:
            cancel(own)
        raise
    return done


def has_compile(spec: JobSpec) -> bool:
    """The job waits for a compile of its checkout (on a remote cluster: a synced one)."""
    return any(p["kind"] == "compile" for p in spec.prerequisites or [])


# ---------------------------------------------------------------- following the chain


class PrerequisiteJob(SlurmJob):
    """A Slurm job of the chain: its log lines marked, the compile's progress in percent, and
    its own verdict (compile: COMPILE_FAILED; import: INFRA_FAILURE)."""

    def __init__(
        self,
        job: ChainJob,
        runner: Runner,
        read: Reader,
        host: str | None,
    ):
        super().__init__(job.job_id, runner, read, job.log_file, job.err_file, host)
        self.kind = job.kind
        self.what = f"{job.kind} job {job.job_id}"
        self.percent: str | None = None

    def logs(self, final: bool = False) -> list[tuple[list[LogLine], str]]:
        got = super().logs(final)
        for lines, _ in got:
            for ln in lines:
                text = ln.text.lstrip()
                if m := _PERCENT.match(text):
                    self.percent = f"{int(m.group(1))}%"
                elif (m := _STEPS.match(text)) and 0 < int(m.group(1)) <= int(m.group(2)):
                    self.percent = f"{int(m.group(1)) * 100 // int(m.group(2))}%"
        return [(lines, f"[{self.kind}] {prefix}") for lines, prefix in got]

    def progress(self, elapsed: float, log_lines: int) -> str:
        st = self.st
        built = f", built {self.percent}" if self.percent else ""
        return (
            f"[watch] {self.what} {st.state or 'UNKNOWN'}, {st.run_time or '-'} run{built}, "
            f"{log_lines} log lines"
        )

    def decide(self, lines: list[LogLine], spec: JobSpec, timed_out: bool) -> Decision:
        st = self.st
        done = st.terminal
        return decide_prerequisite(
            self.kind,
            self.job_id,
            self.state() if done else None,
            st.exit_code if done else None,
            lines,
            timed_out=timed_out,
            signal=st.signal if done else None,
        )


@dataclass(frozen=True)
class _Patterns:
    success_patterns: tuple[str, ...]
    failure_patterns: tuple[str, ...]


_COMPILE = _Patterns(("Built wheel",), ("FAILED:", "error:"))
_IMPORT = _Patterns(("Image already imported", "Importing"), ("[ERROR]",))


def decide_prerequisite(
    kind: str,
    job_id: str,
    state: str | None,
    exit_code: int | None,
    lines: list[LogLine],
    *,
    timed_out: bool = False,
    signal: int | None = None,
) -> Decision:
    """The verdict on a prerequisite job. Its exit code decides (a compiler prints `error:`
    in passing); a compile that failed on its own is COMPILE_FAILED with the first compiler
    error and the first `FAILED:` line; an import that failed is INFRA_FAILURE."""
    pats = _COMPILE if kind == "compile" else _IMPORT
    d = decide_verdict(state, exit_code, lines, pats, timed_out=timed_out, signal=signal)
    ok = exit_code == 0 and state in (None, "COMPLETED") and not timed_out
    if d.verdict is Verdict.FAILED and ok:
        return Decision(Verdict.PASSED, "exit code 0", d.evidence[:1], d.state, d.exit_code)
    if d.verdict is Verdict.PASSED:
        return d
    where = d.evidence[:1]
    if kind == "compile" and d.verdict in (Verdict.FAILED, Verdict.INFRA_FAILURE):
        program = [ln for k, ln in classify(lines) if k in (Kind.PROGRAM, Kind.SETUP)]
        first_error = next((ln for ln in program if "error:" in ln.text), None)
        first_failed = next((ln for ln in program if ln.text.startswith("FAILED: ")), None)
        found = [ln.show() for ln in (first_error, first_failed) if ln is not None]
        if d.verdict is Verdict.FAILED or found:
            shown = found or [ln.show() for ln in program[-5:]]
            reason = f"the compile job {job_id} failed, so the test job never started"
            evidence = [*where, *shown][:MAX_EVIDENCE]
            return Decision(Verdict.COMPILE_FAILED, reason, evidence, d.state, d.exit_code)
    if kind == "import" and d.verdict is Verdict.FAILED:
        d = Decision(Verdict.INFRA_FAILURE, "", d.evidence, d.state, d.exit_code)
    d.reason = (
        f"the {kind} job {job_id}: {d.reason}" if d.reason else f"the {kind} job {job_id} failed"
    )
    d.reason += ", so the test job never started"
    return d


_CHAIN_KEYS = ("kind", "key", "job_id", "log_file", "err_file", "shared")
