"""Asking Slurm about jobs, through a runner (here, or `ssh HOST` for a remote cluster)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trtllm_script_builder.model.values import whole_number
from trtllm_script_builder.process.probe.parse import parse_kv
from trtllm_script_builder.process.proc import CmdResult, Runner
from trtllm_script_builder.slurm_time import seconds_to_time, time_to_seconds

# States after which the job will not change any more (squeue's and sacct's names).
TERMINAL = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
    "REVOKED",
    "LAUNCH_FAILED",
    "SPECIAL_EXIT",
}


@dataclass(slots=True)  # thousands made per poll of a batch
class JobStatus:
    """What Slurm says about a job; `source` is the tool that said it."""

    job_id: str
    state: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    run_time: str | None = None
    time_left: str | None = None
    nodelist: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    source: str = ""
    # The job's own numeric id when `job_id` names an array task (`100_3`) that has started:
    # the id its logs' %j and its SLURM_JOB_ID carry. None while the task is pending.
    raw_id: str | None = None
    # An accounting start record that already shows this final state (decision sacct-end-time): the
    # job counts as ending until its completion record lands, or slurmctld has forgotten it.
    ending_as: str | None = None

    @property
    def known(self) -> bool:
        return self.state is not None

    @property
    def terminal(self) -> bool:
        # asked several times per job and poll, for thousands of jobs: no split of the words
        state = self.state
        if not state:
            return False
        return state.partition(" ")[0].rstrip("+") in TERMINAL


# digits bounded: Python refuses to convert 4,300 of them, and a tool's answer may be hostile
_EXIT_CODE = re.compile(r"\s*(\d{1,9}):(\d{1,9})\s*")


def parse_exit_code(text: str | None) -> tuple[int | None, int | None]:
    """`1:0` -> (1, 0); anything else -> (None, None)."""
    m = _EXIT_CODE.fullmatch(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def status_from_scontrol(job_id: str, text: str) -> JobStatus:
    """`scontrol show job -o ID`: the first line is the job's record (an array's tasks
    follow it)."""
    f = parse_kv(text.strip().split("\n")[0])
    if not f.get("JobState"):
        return JobStatus(job_id, source="scontrol")
    code, sig = parse_exit_code(f.get("ExitCode"))
    limit, ran = time_to_seconds(f.get("TimeLimit")), time_to_seconds(f.get("RunTime"))
    left = seconds_to_time(max(limit - ran, 0)) if limit is not None and ran is not None else None
    return JobStatus(
        job_id,
        state=f["JobState"],
        exit_code=code,
        signal=sig,
        reason=f.get("Reason"),
        run_time=f.get("RunTime"),
        time_left=left,
        nodelist=f.get("NodeList"),
        stdout=f.get("StdOut"),
        stderr=f.get("StdErr"),
        source="scontrol",
        raw_id=_started_id(f["JobState"], f.get("JobId")),
    )


def _started_id(state: str | None, raw: str | None) -> str | None:
    """A pending array task is shown from its array's record (whose JobId is the array's);
    a started one has its own record and id."""
    # asked for every row of every poll: digits checked without a regex (as whole_number)
    if not raw or len(raw) > 18 or not (raw.isascii() and raw.isdigit()):
        return None
    if (state or "").startswith("PENDING"):
        return None
    return raw


_TASK = re.compile(r"(\d{1,18})_(\d{1,9})")
_ARRAY_ROW = re.compile(r"(\d+)(?:_\[([\d,-]+)(?:%\d+)?\])?")


def _in_ranges(task: int, ranges: str) -> bool:
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        low, high = whole_number(lo), whole_number(hi or lo)
        if low is not None and high is not None and low <= task <= high:
            return True
    return False


def array_record(rows: dict[str, JobStatus], job_id: str) -> JobStatus | None:
    """An array task that never started has no row of its own: the array's record of its
    unstarted tasks (`ARRAY` once they were cancelled, `ARRAY_[1-3]` while pending; no node
    was assigned) speaks for it, without an exit code or an own job id. (Just after an array
    ended, accounting may show its last task as `ARRAY` for a moment, with its node: that row
    is not taken.)"""
    m = _TASK.fullmatch(job_id)
    if m is None:
        return None
    array, task = m.group(1), int(m.group(2))
    for key, st in rows.items():
        row = _ARRAY_ROW.fullmatch(key)
        if row is None or row.group(1) != array or st.state not in ("CANCELLED", "PENDING"):
            continue
        if not (st.nodelist or "None").startswith("None"):
            continue
        if row.group(2) is None or _in_ranges(task, row.group(2)):
            return JobStatus(job_id, state=st.state, source="sacct")
    return None


def _array_seen(rows: dict[str, JobStatus], job_id: str) -> bool:
    """Accounting has some row of the array this task (`ARRAY_TASK`) belongs to."""
    m = _TASK.fullmatch(job_id)
    if m is None:
        return False
    for key in rows:
        row = _TASK.fullmatch(key) or _ARRAY_ROW.fullmatch(key)
        if row is not None and row.group(1) == m.group(1):
            return True
    return False


# A pending task cancelled on its own just before the array's record started another task
# leaves no record anywhere (decision array-task-removed).
REMOVED = "removed from its array before it started; Slurm keeps no record of it"


def _removed(job_id: str, show: CmdResult) -> JobStatus | None:
    if show.rc != 0 and show.out.strip() == f"Job {job_id} not found":
        return JobStatus(job_id, state="CANCELLED", reason=REMOVED, source="scontrol")
    return None


def _with_arrays(job_ids: list[str]) -> str:
    """The ids for `sacct -j`: each array task's array too, for array_record."""
    arrays = [m.group(1) for j in job_ids if (m := _TASK.fullmatch(j))]
    return ",".join(dict.fromkeys([*job_ids, *arrays]))


SACCT_FIELDS = "JobID,State,ExitCode,Elapsed,NodeList,JobIDRaw,End"
# Slurm's word for a job between its end and its last record (decision sacct-end-time).
ENDING = "COMPLETING"


def sacct_rows(text: str) -> dict[str, JobStatus]:
    """Every row of `sacct -X -n -P -o SACCT_FIELDS`, by JobID. A row with a final state but
    no end time is the start record of a job that ended before accounting stored its start:
    its exit code is not written yet (it reads 0:0), so it counts as still ending."""
    rows: dict[str, JobStatus] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        code, sig = parse_exit_code(parts[2])
        state = parts[1].split()[0] if parts[1] else None
        ending_as = None
        if len(parts) > 6 and parts[6] == "Unknown" and state and state.rstrip("+") in TERMINAL:
            state, code, sig, ending_as = ENDING, None, None, state
        rows[parts[0]] = JobStatus(
            parts[0],
            state=state,
            exit_code=code,
            signal=sig,
            run_time=parts[3] if len(parts) > 3 else None,
            nodelist=parts[4] if len(parts) > 4 else None,
            source="sacct",
            raw_id=_started_id(state, parts[5] if len(parts) > 5 else None),
            ending_as=ending_as,
        )
    return rows


def _forgotten(row: JobStatus, show: CmdResult) -> JobStatus:
    """A start record slurmctld no longer knows the job of (`Invalid job id`, not a failed
    call) has the last word: its final state, the exit code unknown."""
    if row.ending_as and show.rc != 0 and "Invalid job id" in show.err:
        row.state, row.ending_as = row.ending_as, None
    return row


# squeue -r lists every array task on its own line: `ARRAY_TASK` (%i), its own job id (%A;
# the array's while pending), state, reason, time used, time left, nodes.
SQUEUE_FORMAT = "%i|%A|%T|%r|%M|%L|%N"


def squeue_rows(text: str) -> dict[str, JobStatus]:
    rows: dict[str, JobStatus] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 7 or not parts[0]:
            continue
        rows[parts[0]] = JobStatus(
            parts[0],
            state=parts[2] or None,
            reason=parts[3] or None,
            run_time=parts[4] or None,
            time_left=parts[5] or None,
            nodelist=parts[6] or None,
            source="squeue",
            raw_id=_started_id(parts[2], parts[1]),
        )
    return rows


NO_ANSWER = "no answer"  # JobStatus.source of a poll squeue did not answer in time


def query_many(runner: Runner, job_ids: list[str], accounting: bool) -> dict[str, JobStatus]:
    """The status of many jobs (plain ids and array tasks `ARRAY_TASK`) in one squeue call,
    plus one sacct call for those that ended; scontrol is asked one by one only about jobs
    that ended but sacct does not know yet (it lags behind slurmctld by a moment), or about
    every ended job without accounting. An id no tool knows maps to an unknown JobStatus."""
    out: dict[str, JobStatus] = {}
    if not job_ids:
        return out
    res = runner(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT])
    silent = res.timed_out  # slurmctld does not answer: slurmdbd (sacct) still may
    queued = squeue_rows(res.out) if res.rc == 0 else {}
    gone = []
    ending: dict[str, JobStatus] = {}  # sacct's start records of jobs still ending
    unseen: set[str] = set()  # array tasks of an array accounting knows, not known themselves
    for job in job_ids:
        st = queued.get(job)
        if st is not None and not st.terminal and st.state != ENDING:
            out[job] = st
        else:
            gone.append(job)
    if gone and accounting:
        acct = runner(["sacct", "-X", "-n", "-P", "-j", _with_arrays(gone), "-o", SACCT_FIELDS])
        rows = sacct_rows(acct.out) if acct.rc == 0 else {}
        lagging: list[str] = []
        for job in gone:
            st = rows.get(job) or array_record(rows, job)
            if st is not None and st.terminal:
                out[job] = st
            elif job in queued or (st is not None and st.state == ENDING):
                lagging.append(job)  # sacct lags behind slurmctld for a moment
                if st is not None:
                    ending[job] = st
            elif st is None and _array_seen(rows, job):
                lagging.append(job)  # started a moment ago, or removed before it started
                unseen.add(job)
            else:
                out[job] = st or JobStatus(job, source=NO_ANSWER if silent else "")
        gone = lagging  # squeue has no exit code: slurmctld's record has, while it lasts
    if gone and silent:  # scontrol would ask the slurmctld that did not answer squeue
        for job in gone:
            out[job] = ending.get(job) or JobStatus(job, source=NO_ANSWER)
        return out
    if gone:
        for job in gone:
            show = runner(["scontrol", "show", "job", "-o", job])
            st = status_from_scontrol(job, show.out) if show.rc == 0 else JobStatus(job)
            if st.known or job in queued:
                out[job] = st if st.known else queued[job]
            elif job in ending:
                out[job] = _forgotten(ending[job], show)
            else:
                out[job] = (_removed(job, show) if job in unseen else None) or st
    return out


def accounting_on(runner: Runner) -> bool:
    """sacct answers (slurmdbd is configured and up)."""
    res = runner(["sacct", "-n", "-X", "-j", "1", "-o", "JobID"])
    return res.rc == 0


def submitted_id(result: CmdResult) -> str | None:
    """`sbatch --parsable` prints `jobid[;cluster]`."""
    first = result.out.strip().splitlines()[0] if result.out.strip() else ""
    job = first.split(";")[0].strip()
    return job if whole_number(job) is not None else None
