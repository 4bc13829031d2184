"""Batches (submit / watch of a build-many folder) without a cluster: the shape grouping, the
array driver script (run with bash as Slurm would run one task), the batched Slurm queries,
and the batch watch loop with results.json and the merged JUnit report against a fake Slurm
(squeue / sacct / scancel answered from a script of states)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import shell_here
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import SlurmParams
from trtllm_script_builder.process import batch_results, host, slurm
from trtllm_script_builder.process import watch as watch_mod
from trtllm_script_builder.process.batch_results import batch_exit_status
from trtllm_script_builder.process.follow import Prerequisite
from trtllm_script_builder.process.handles import read_local
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.process.slurm_submit import (
    BATCH_SUBMISSION,
    BatchJob,
    BatchSubmission,
    directives,
    group_by_shape,
    read_index,
    render_driver,
    shape,
    shared_lines,
)
from trtllm_script_builder.process.ssh import SshTarget
from trtllm_script_builder.process.verdict import Verdict
from trtllm_script_builder.process.watch import Console, watch_batch

from .conftest import job_spec

GOLDEN_SPEC = Path(__file__).parent / "golden" / "cat2_pytest_local_slurm" / "job_spec.json"


def script(name: str, gres: str = "gpu:1", time: str = "00:10:00") -> str:
    return (
        "#!/bin/bash\n"
        f"#SBATCH --job-name={name}\n"
        f"#SBATCH --output=/w/{name}/{name}_%j.out\n"
        f"#SBATCH --error=/w/{name}/{name}_%j.err\n"
        "#SBATCH --nodes=1\n"
        f"#SBATCH --gres={gres}\n"
        f"#SBATCH --time={time}\n"
        "#\n"
        "# a comment\n"
        "set -euo pipefail\n"
        "#SBATCH --gres=gpu:8\n"  # after the first command: sbatch reads it no more
    )


# ---------------------------------------------------------------- shapes


def test_the_driver_takes_the_sbatch_lines_but_the_jobs_own() -> None:
    a, b = directives(script("a")), directives(script("b"))
    assert a != b
    assert shared_lines(a) == shared_lines(b)
    assert "#SBATCH --gres=gpu:8" not in a  # after the first command: sbatch reads it no more
    assert shared_lines(a) == [
        "#SBATCH --nodes=1",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --time=00:10:00",
    ]


def _params(**over: Any) -> SlurmParams:
    base = SlurmParams(
        partition="gpu",
        account="a",
        time_limit="00:10:00",
        nodes=1,
        ntasks=1,
        ntasks_per_node=1,
        gpus_per_node=8,
        gres="gpu:1",
        mpi_plugin="pmix",
    )
    return base.model_copy(update=over)


def spec(**fields: Any) -> Any:
    return job_spec(**{"slurm_params": _params(), **fields})


def test_jobs_of_one_allocation_share_a_shape_whatever_their_names() -> None:
    """The shape comes from job_spec.json, not from the scripts' #SBATCH lines."""
    one = shape(spec(model_name="a", script_path="/w/a/a.slurm"))
    assert one == shape(spec(model_name="b", script_path="/w/b/b.slurm"))
    others = [
        shape(spec(slurm_params=_params(gres="gpu:2"))),
        shape(spec(slurm_params=_params(time_limit="00:20:00"))),
        shape(spec(execution_scenario="remote_slurm", ssh_host="login1")),
        shape(spec(category=2)),
    ]
    assert len({one, *others}) == 5


def test_group_by_shape_keeps_the_order_of_first_members() -> None:
    keys = [("x", 2), ("y",), ("x", 2), ("x", 3), ("z",), ("y",)]
    assert group_by_shape(keys) == [[0, 2], [1, 5], [3], [4]]


def test_read_index_takes_built_rows_and_their_work_dir(tmp_path: Path) -> None:
    rows = [
        {"line": 1, "entry": "a", "status": "built", "work_dir": str(tmp_path / "x_named")},
        {"line": 2, "entry": "b", "status": "error", "error": "error: ..."},
        {"line": 3, "entry": "c", "status": "built", "work_dir": "relative_one"},
    ]
    (tmp_path / "jobs.json").write_text(json.dumps(rows))
    members = read_index(tmp_path)
    assert [(m.work_dir, m.entry, m.line) for m in members] == [
        (tmp_path / "x_named", "a", 1),
        (tmp_path / "relative_one", "c", 3),
    ]
    (tmp_path / "jobs.json").write_text('[{"status": "built"}]')
    with pytest.raises(BuildError, match="a built row has no work_dir"):
        read_index(tmp_path)


# ---------------------------------------------------------------- the driver


def _members(tmp_path: Path) -> list[tuple[str, str, str, str]]:
    out = []
    for i, name in enumerate(["plain", "with space", "it's $odd"]):
        folder = tmp_path / name
        folder.mkdir()
        job = folder / "job.slurm"
        job.write_text('#!/bin/bash\necho "job $SLURM_JOB_ID in $PWD"\necho oops >&2\n')
        err = "" if i == 2 else str(folder / "log_%j.err")
        out.append((str(folder), str(job), str(folder / "log_%j.out"), err))
    return out


def test_driver_passes_bash_n_and_shellcheck(tmp_path: Path) -> None:
    text = render_driver(
        ["#SBATCH --nodes=1", "#SBATCH --gres=gpu:1"],
        "tiny_auto_test",
        "/b/batch_array0_%A_%a.out",
        _members(tmp_path),
        max_running=2,
    )
    assert "#SBATCH --array=0-2%2\n" in text
    driver = tmp_path / "driver.slurm"
    driver.write_text(text)
    assert subprocess.run(["bash", "-n", str(driver)], check=False).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", str(driver)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("task", [0, 1, 2])
def test_a_task_runs_its_job_in_its_folder_with_its_own_logs(tmp_path: Path, task: int) -> None:
    members = _members(tmp_path)
    driver = tmp_path / "driver.slurm"
    driver.write_text(render_driver([], "n", "/b/x_%A_%a.out", members, None))
    env = {"PATH": "/usr/bin:/bin", "SLURM_ARRAY_TASK_ID": str(task), "SLURM_JOB_ID": "4711"}
    res = subprocess.run(
        ["bash", str(driver)], env=env, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == res.stderr == ""  # all of it went to the job's own logs
    folder = Path(members[task][0])
    out = (folder / "log_4711.out").read_text()
    assert out.startswith(f"job 4711 in {folder}\n")
    if task == 2:  # no error pattern: both streams in the one log
        assert out.endswith("oops\n")
    else:
        assert (folder / "log_4711.err").read_text() == "oops\n"
    others = [Path(m[0]) for i, m in enumerate(members) if i != task]
    assert not [p for o in others for p in o.glob("log_*")]


def test_a_driver_run_outside_an_array_refuses(tmp_path: Path) -> None:
    driver = tmp_path / "driver.slurm"
    driver.write_text(render_driver([], "n", "/b/x_%A_%a.out", _members(tmp_path), None))
    res = subprocess.run(
        ["bash", str(driver)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert res.returncode != 0 and "not a task of a job array" in res.stderr


# ---------------------------------------------------------------- batched queries


class FakeSlurm:
    """squeue / sacct / scancel from a script: `states[id]` is the list of states a job shows
    poll after poll (the last one stays); a job leaves squeue once its state is final."""

    def __init__(self, states: dict[str, list[str]], raw: dict[str, str]) -> None:
        self.states, self.raw = states, raw
        self.calls: list[list[str]] = []
        self.polls = 0
        self.cancelled: set[str] = set()

    def state(self, job: str) -> str:
        if job in self.cancelled:
            return "CANCELLED"
        seq = self.states[job]
        return seq[min(self.polls, len(seq) - 1)]

    def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "squeue":
            ids = argv[argv.index("-j") + 1].split(",")
            lines = []
            for job in ids:
                st = self.state(job)
                if st in ("PENDING", "RUNNING"):
                    own = self.raw[job] if st == "RUNNING" else job.split("_")[0]
                    reason = "JobArrayTaskLimit" if st == "PENDING" else "None"
                    lines.append(f"{job}|{own}|{st}|{reason}|0:01|9:59|n1")
            self.polls += 1
            return CmdResult(0, "\n".join(lines))
        if argv[0] == "sacct":
            if "-j" not in argv or argv[argv.index("-j") + 1] == "1":
                return CmdResult(0, "")  # accounting_on
            ids = argv[argv.index("-j") + 1].split(",")
            rows = []
            for job in ids:
                if job not in self.states:  # an array's own record: none in this script
                    continue
                st = self.state(job)
                code = {"COMPLETED": "0:0", "FAILED": "1:0"}.get(st, "0:15")
                rows.append(f"{job}|{st}|{code}|00:00:05|n1|{self.raw[job]}")
            return CmdResult(0, "\n".join(rows))
        if argv[0] == "scancel":
            self.cancelled.update(argv[1:])
            return CmdResult(0)
        return CmdResult(1, "", "unexpected")


def test_query_many_asks_squeue_once_and_sacct_once_for_the_ended() -> None:
    fake = FakeSlurm(
        {"7_0": ["COMPLETED"], "7_1": ["RUNNING"], "7_2": ["PENDING"], "9": ["FAILED"]},
        {"7_0": "8", "7_1": "10", "7_2": "7", "9": "9"},
    )
    got = slurm.query_many(fake, ["7_0", "7_1", "7_2", "9"], accounting=True)
    assert [c[0] for c in fake.calls] == ["squeue", "sacct"]
    assert fake.calls[1][fake.calls[1].index("-j") + 1] == "7_0,9,7"  # and 7_0's array
    assert (got["7_0"].state, got["7_0"].exit_code, got["7_0"].raw_id) == ("COMPLETED", 0, "8")
    assert (got["7_1"].state, got["7_1"].raw_id) == ("RUNNING", "10")
    # a pending task shows its array's id, which is not its own
    assert (got["7_2"].state, got["7_2"].reason, got["7_2"].raw_id) == (
        "PENDING",
        "JobArrayTaskLimit",
        None,
    )
    assert (got["9"].state, got["9"].exit_code) == ("FAILED", 1)


def _from_sacct(job_id: str, text: str) -> slurm.JobStatus:
    """A job's status from sacct's rows, looked up as query_many does."""
    rows = slurm.sacct_rows(text)
    return rows.get(job_id) or slurm.array_record(rows, job_id) or slurm.JobStatus(job_id)


def test_a_task_cancelled_before_it_started_takes_its_arrays_record() -> None:
    """sacct has no row of a task that never started: the array's own row (`101` once its
    unstarted tasks ended, `101_[1-3%1]` while they wait) answers for it."""
    ended = (
        "101_0|CANCELLED by 0|0:0|00:00:01|cpunode|102\n"
        "101|CANCELLED by 0|0:0|00:00:00|None assigned|101\n"
    )
    st = _from_sacct("101_2", ended)
    assert (st.state, st.exit_code, st.raw_id, st.terminal) == ("CANCELLED", None, None, True)
    assert _from_sacct("101_0", ended).raw_id == "102"
    assert _from_sacct("102_2", ended).state is None
    # just after an array ended, accounting may list its last task as the bare array id
    lagging = "101|COMPLETED|0:0|00:00:00|cpunode|101\n"
    assert _from_sacct("101_2", lagging).state is None
    waiting = "101_0|RUNNING|0:0|00:00:01|cpunode|102\n101_[1-3%1]|PENDING|0:0|00:00:00||101\n"
    assert _from_sacct("101_3", waiting).state == "PENDING"
    assert _from_sacct("101_4", waiting).state is None
    calls: list[list[str]] = []

    def runner(argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        calls.append(list(argv))
        return CmdResult(0, "" if argv[0] == "squeue" else ended)

    got = slurm.query_many(runner, ["101_0", "101_2"], accounting=True)
    assert calls[1][calls[1].index("-j") + 1] == "101_0,101_2,101"
    assert (got["101_0"].state, got["101_2"].state) == ("CANCELLED", "CANCELLED")


def test_a_task_removed_before_it_started_is_cancelled_not_unknown() -> None:
    """`scancel 33_0 33_2`, then 33_1 starts as job 33 (the array's record), then `scancel 33_1`:
    the pending task 33_2 has no record anywhere (decision array-task-removed). Its array is in
    accounting and slurmctld answers `not found`: it was cancelled before it started."""
    answers = {
        "squeue": "",
        "sacct": "33_0|CANCELLED by 0|0:0|00:00:02|n1|35\n33_1|CANCELLED by 0|0:0|00:00:02|n1|33\n",
    }
    calls: list[list[str]] = []

    def runner(argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        calls.append(list(argv))
        if argv[0] == "scontrol":
            return CmdResult(1, f"Job {argv[-1]} not found\n")
        return CmdResult(0, answers[argv[0]])

    got = slurm.query_many(runner, ["33_0", "33_1", "33_2"], accounting=True)
    assert [c[0] for c in calls] == ["squeue", "sacct", "scontrol"]
    assert (got["33_2"].state, got["33_2"].terminal, got["33_2"].reason) == (
        "CANCELLED",
        True,
        slurm.REMOVED,
    )
    assert (got["33_1"].state, got["33_1"].raw_id) == ("CANCELLED", "33")
    # slurmctld not answering is not "not found"; an array accounting does not know stays unknown
    calls.clear()

    def down(argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        if argv[0] == "scontrol":
            return CmdResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller")
        return CmdResult(0, answers[argv[0]])

    assert not slurm.query_many(down, ["33_2"], accounting=True)["33_2"].known
    assert not slurm.query_many(runner, ["34_2"], accounting=True)["34_2"].known
    # a task that just started, not yet in accounting: slurmctld's record answers
    started = "JobId=36 ArrayJobId=33 ArrayTaskId=2 JobState=RUNNING Reason=None"

    def fresh(argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        return CmdResult(0, started) if argv[0] == "scontrol" else CmdResult(0, answers[argv[0]])

    assert slurm.query_many(fresh, ["33_2"], accounting=True)["33_2"].raw_id == "36"


def test_an_end_sacct_does_not_know_yet_is_asked_of_scontrol() -> None:
    """squeue -j lists a job that just ended (no exit code); sacct still says RUNNING."""
    answers = {
        "squeue": "7_1|9|COMPLETED|None|0:05|0:00|n1\n7_0|8|RUNNING|None|0:05|9:55|n1\n",
        "sacct": "7_1|RUNNING|0:0|00:00:05|n1|9\n",
        "scontrol": "JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode "
        "ExitCode=3:0 RunTime=00:00:05 TimeLimit=00:10:00",
    }
    calls: list[list[str]] = []

    def runner(argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        calls.append(list(argv))
        return CmdResult(0, answers[argv[0]])

    got = slurm.query_many(runner, ["7_0", "7_1"], accounting=True)
    assert [c[0] for c in calls] == ["squeue", "sacct", "scontrol"]
    assert calls[2][-1] == "7_1"
    assert (got["7_1"].state, got["7_1"].exit_code, got["7_1"].raw_id) == ("FAILED", 3, "9")
    assert got["7_0"].state == "RUNNING"


def test_a_start_record_with_a_final_state_is_not_the_end() -> None:
    """A job that failed within a second: accounting may hold its start record already saying
    FAILED, with End=Unknown and ExitCode 0:0, before the completion record lands
    (decision sacct-end-time). It is not taken as the end by query_many (gone from squeue, asked of
    scontrol)."""
    early = "9|FAILED|0:0|00:00:01|n1|9|Unknown\n"
    assert (slurm.sacct_rows(early)["9"].state, slurm.sacct_rows(early)["9"].terminal) == (
        slurm.ENDING,
        False,
    )
    done = "9|FAILED|1:0|00:00:01|n1|9|2026-12-03T08:00:01\n"
    assert (slurm.sacct_rows(done)["9"].state, slurm.sacct_rows(done)["9"].exit_code) == (
        "FAILED",
        1,
    )
    show = "JobId=9 JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 RunTime=00:00:01"
    answers = {"squeue": "", "sacct": early, "scontrol": show}
    calls: list[str] = []

    def runner(argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        calls.append(argv[0])
        return CmdResult(0, answers[argv[0]])

    got = slurm.query_many(runner, ["9"], accounting=True)
    assert calls == ["squeue", "sacct", "scontrol"]
    assert (got["9"].state, got["9"].exit_code) == ("FAILED", 1)
    assert got["9"].source == "scontrol"
    # scontrol gave no answer while accounting still ends it: poll again, no verdict yet
    answers["scontrol"] = ""
    assert not slurm.query_many(runner, ["9"], accounting=True)["9"].terminal

    # slurmctld has forgotten the job (MinJobAge) and the completion never landed: the start
    # record's final state is the end, with the exit code unknown (watch does not poll forever)
    def forgotten(argv: Any, cwd: Any = None) -> CmdResult:
        if argv[0] == "scontrol":
            return CmdResult(1, "", "slurm_load_jobs error: Invalid job id specified")
        return CmdResult(0, answers[argv[0]])

    st = slurm.query_many(forgotten, ["9"], True)["9"]
    assert (st.state, st.exit_code, st.terminal) == ("FAILED", None, True)


def test_scontrol_takes_a_task_id_only_once_it_started() -> None:
    pending = "JobId=7 ArrayJobId=7 ArrayTaskId=2 JobState=PENDING Reason=JobArrayTaskLimit"
    running = "JobId=12 ArrayJobId=7 ArrayTaskId=2 JobState=RUNNING Reason=None"
    assert slurm.status_from_scontrol("7_2", pending).raw_id is None
    assert slurm.status_from_scontrol("7_2", running).raw_id == "12"


# ---------------------------------------------------------------- exit status


def test_batch_exit_status() -> None:
    assert batch_exit_status([Verdict.PASSED, Verdict.PASSED]) == 0
    assert batch_exit_status([Verdict.PASSED, Verdict.TIMEOUT, Verdict.TIMEOUT]) == 11
    assert batch_exit_status([Verdict.NOT_RUN]) == 15
    assert batch_exit_status([Verdict.PASSED, Verdict.FAILED, Verdict.NOT_RUN]) == 1
    assert batch_exit_status([Verdict.TIMEOUT, Verdict.CANCELLED]) == 1


# ---------------------------------------------------------------- the watch loop

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="{f}" skipped="0" tests="1"
time="1.5"><testcase classname="accuracy.test_x" name="{name}" time="0.1">{body}</testcase>
</testsuite></testsuites>
"""


def make_batch(tmp_path: Path, jobs: list[tuple[str, str | None]]) -> Path:
    """A submitted batch folder: (name, array id or None) per job, job_specs from the golden
    pytest job with work_dir moved to the job's folder."""
    folder = tmp_path / "batch"
    rows: list[BatchJob] = []
    golden = json.loads(GOLDEN_SPEC.read_text())
    for i, (name, array) in enumerate(jobs):
        work = folder / name
        work.mkdir(parents=True)
        spec = {**golden, "work_dir": str(work), "script_path": str(work / "x.slurm")}
        spec["container_mounts"] = ""
        (work / "job_spec.json").write_text(json.dumps(spec))
        job_id = f"{array}_{i}" if array else str(500 + i)
        rows.append(
            BatchJob(
                work_dir=str(work),
                entry=f"accuracy/test_x.py::{name}",
                job_id=job_id,
                array_job_id=array,
                array_task_id=i if array else None,
            )
        )
    batch = BatchSubmission(
        batch_dir=str(folder),
        scenario="local_slurm",
        submitted_at="now",
        host="h",
        arrays=[],
        jobs=rows,
    )
    (folder / BATCH_SUBMISSION).write_text(batch.model_dump_json())
    (folder / "jobs.json").write_text("[]")
    return folder


def write_logs(folder: Path, name: str, own: str, ok: bool, junit: bool = True) -> None:
    work = folder / name
    out = work / f"tiny_auto_test_{own}.out"
    summary = "1 passed in 0.1s" if ok else "1 failed in 0.1s"
    out.write_text(f"Job {own} started on n1: 1 node(s), 1 task(s)\n{summary}\n")
    if junit:
        body = "" if ok else '<failure message="boom">trace</failure>'
        text = JUNIT.format(f=0 if ok else 1, name=name, body=body)
        (work / f"tiny_auto_test_{own}_junit.xml").write_text(text)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def run_watch(
    folder: Path, fake: FakeSlurm, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> tuple[batch_results.BatchResult, str]:
    monkeypatch.setattr(host, "run", fake)
    err = io.StringIO()
    clock = Clock()
    result = watch_batch(
        folder,
        console=Console(io.StringIO(), err),
        poll=1.0,
        clock=clock,
        sleep=clock.sleep,
        **kw,
    )
    return result, err.getvalue()


def test_one_query_per_poll_and_results_with_merged_junit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_batch(tmp_path, [("test_ok", "7"), ("test_bad", "7"), ("test_alone", None)])
    write_logs(folder, "test_ok", "8", ok=True)
    write_logs(folder, "test_bad", "9", ok=False)
    write_logs(folder, "test_alone", "502", ok=True, junit=False)
    fake = FakeSlurm(
        {
            "7_0": ["RUNNING", "COMPLETED"],
            "7_1": ["PENDING", "PENDING", "RUNNING", "FAILED"],
            "502": ["RUNNING", "RUNNING", "COMPLETED"],
        },
        {"7_0": "8", "7_1": "9", "502": "502"},
    )
    result, err = run_watch(folder, fake, monkeypatch)
    squeues = [c for c in fake.calls if c[0] == "squeue"]
    assert len(squeues) == fake.polls == 4  # one per poll, for every open job at once
    assert squeues[0][squeues[0].index("-j") + 1] == "7_0,7_1,502"
    assert squeues[-1][squeues[-1].index("-j") + 1] == "7_1"
    assert result.exit_status == 1
    data = json.loads((folder / "results.json").read_text())
    assert data == result.to_json()
    assert data["summary"] == {"jobs": 3, "verdicts": {"PASSED": 2, "FAILED": 1}, "exit_status": 1}
    rows = {r["entry"].split("::")[1]: r for r in data["jobs"]}
    assert rows["test_bad"]["job_id"] == "9" and rows["test_bad"]["array_task"] == "7_1"
    assert rows["test_bad"]["tests"]["failing"] == ["accuracy/test_x.py::test_bad"]
    assert rows["test_alone"]["array_task"] is None
    assert rows["test_alone"]["tests"]["passed"] == 1  # its summary line: no JUnit report
    for name, row in rows.items():
        verdict = json.loads((folder / name / "verdict.json").read_text())
        assert (verdict["verdict"], verdict["job_id"]) == (row["verdict"], row["job_id"])
    junit = ET.parse(folder / "junit.xml").getroot()
    assert (junit.tag, junit.get("tests"), junit.get("failures"), junit.get("time")) == (
        "testsuites",
        "2",
        "1",
        "3.000",
    )
    assert [s.get("name") for s in junit] == ["test_ok", "test_bad"]
    assert "[watch] FAILED: accuracy/test_x.py::test_bad (job 9 (7_1): " in err
    assert "[watch] 0/3 done, 2 running, 1 pending, 0 passed, 0 failed, 0 other" in err


def test_timeout_cancels_every_open_job_with_one_scancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_batch(tmp_path, [("test_a", "7"), ("test_b", "7"), ("test_c", None)])
    write_logs(folder, "test_a", "8", ok=True)
    fake = FakeSlurm(
        {"7_0": ["COMPLETED"], "7_1": ["PENDING"], "502": ["RUNNING"]},
        {"7_0": "8", "7_1": "9", "502": "502"},
    )
    result, err = run_watch(folder, fake, monkeypatch, timeout=3.0)
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "7_1", "502"]]
    assert "timeout after 3s: cancelling 2 job(s)" in err
    verdicts = [r.verdict for r in result.jobs]
    assert verdicts == [Verdict.PASSED, Verdict.TIMEOUT, Verdict.TIMEOUT]
    assert result.exit_status == Verdict.TIMEOUT.exit_code
    assert result.to_json()["cancelled_by_watch"] == "timeout"


def test_keep_running_cancels_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_batch(tmp_path, [("test_a", "7"), ("test_b", "7")])
    fake = FakeSlurm({"7_0": ["RUNNING"], "7_1": ["PENDING"]}, {"7_0": "8", "7_1": "9"})
    result, err = run_watch(folder, fake, monkeypatch, timeout=2.0, keep_running=True)
    assert not [c for c in fake.calls if c[0] == "scancel"]
    assert "2 job(s) keep running" in err
    assert [r.verdict for r in result.jobs] == [Verdict.TIMEOUT, Verdict.TIMEOUT]


def test_an_interrupt_cancels_when_told_and_waits_for_the_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_batch(tmp_path, [("test_a", "7"), ("test_b", "7")])
    fake = FakeSlurm({"7_0": ["RUNNING"], "7_1": ["PENDING"]}, {"7_0": "8", "7_1": "9"})
    asked: list[int] = []
    monkeypatch.setattr(host, "run", fake)
    clock = Clock()

    def sleep(s: float) -> None:
        clock.sleep(s)
        if clock.now == 1.0:  # Ctrl-C during the first wait
            raise KeyboardInterrupt

    def ask(n: int) -> bool:
        asked.append(n)
        return True

    result = watch_batch(
        folder,
        console=Console(io.StringIO(), io.StringIO()),
        poll=1.0,
        clock=clock,
        sleep=sleep,
        on_interrupt=ask,
    )
    assert asked == [2]
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "7_0", "7_1"]]
    assert [r.verdict for r in result.jobs] == [Verdict.CANCELLED, Verdict.CANCELLED]
    assert result.exit_status == Verdict.CANCELLED.exit_code


def test_an_interrupt_answered_no_leaves_the_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_batch(tmp_path, [("test_a", "7")])
    fake = FakeSlurm({"7_0": ["RUNNING"]}, {"7_0": "8"})
    monkeypatch.setattr(host, "run", fake)

    def sleep(s: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        watch_batch(
            folder,
            console=Console(io.StringIO(), io.StringIO()),
            sleep=sleep,
            on_interrupt=lambda n: False,
        )
    assert not [c for c in fake.calls if c[0] == "scancel"]
    assert not (folder / "results.json").exists()


def test_hang_in_one_running_job_cancels_that_job_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_batch(tmp_path, [("test_a", "7"), ("test_b", "7")])
    (folder / "test_a" / "tiny_auto_test_8.out").write_text("step 1\nHang detected on rank 0\n")
    (folder / "test_b" / "tiny_auto_test_9.out").write_text("step 1\n")
    fake = FakeSlurm(
        {"7_0": ["RUNNING"], "7_1": ["RUNNING", "RUNNING", "COMPLETED"]},
        {"7_0": "8", "7_1": "9"},
    )
    result, err = run_watch(folder, fake, monkeypatch)
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "7_0"]]
    assert "'hang detected' in the log: cancelling job 8 (7_0)" in err
    assert [r.verdict for r in result.jobs] == [Verdict.HANG_DETECTED, Verdict.PASSED]
    assert result.to_json()["jobs"][0]["reason"] == "'hang detected' in the log"


# ---------------------------------------------------------------- prerequisites (chains)
# A batch built with compile / sqsh_cache_dir: one import and one compile per key for the
# whole batch, the arrays after them (decisions compile-chain and batch-prerequisites), and the
# chain followed in the same loop.

IMPORT_KEY = "import:/sqsh/img.sqsh"
COMPILE_KEY = "compile:/repo /sqsh/img.sqsh --cuda_architectures 90-real --dist_dir /wheel"


def test_jobs_waiting_for_different_prerequisites_do_not_share_a_shape() -> None:
    def keyed(*keys: str, name: str = "m") -> tuple[object, ...]:
        pre = [{"kind": "compile", "key": k, "script_path": "/w/c.slurm"} for k in keys]
        return shape(spec(model_name=name, prerequisites=pre or None))

    plain = keyed()
    compiled = keyed(IMPORT_KEY, COMPILE_KEY)
    other = keyed(IMPORT_KEY, COMPILE_KEY + " --benchmarks")
    assert len({plain, compiled, other}) == 3
    assert compiled == keyed(IMPORT_KEY, COMPILE_KEY, name="other")
    assert compiled[-2:] == (f"after {IMPORT_KEY}", f"after {COMPILE_KEY}")


def chain_folder(tmp_path: Path, compile_keys: list[str]) -> Path:
    """A built (not submitted) batch folder: one job per compile key, all of one image import,
    their scripts of one shape."""
    folder = tmp_path / "batch"
    golden = json.loads(GOLDEN_SPEC.read_text())
    rows = []
    for i, key in enumerate(compile_keys):
        name = f"job{i}"
        work = folder / name
        work.mkdir(parents=True)
        (work / "x.slurm").write_text(script(name))
        prereqs = [
            {"kind": "import", "key": IMPORT_KEY, "script_path": str(work / "import.slurm"),
             "log_file_pattern": f"{name}_import_%j.out",
             "error_file_pattern": f"{name}_import_%j.err"},
            {"kind": "compile", "key": key, "script_path": str(work / "compile.slurm"),
             "log_file_pattern": f"{name}_compile_%j.out",
             "error_file_pattern": f"{name}_compile_%j.err"},
        ]  # fmt: skip
        spec = {**golden, "work_dir": str(work), "script_path": str(work / "x.slurm")}
        spec["prerequisites"] = prereqs
        (work / "job_spec.json").write_text(json.dumps(spec))
        rows.append({"line": i + 1, "entry": name, "status": "built", "work_dir": str(work)})
    (folder / "jobs.json").write_text(json.dumps(rows))
    return folder


class FakeSbatch:
    """sbatch answering ids 100, 101, ... (or failing for the script named in `fail`), and
    scancel; every call kept."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.calls: list[list[str]] = []
        self.next = 100

    def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sbatch":
            if self.fail and argv[-1].endswith(self.fail):
                return CmdResult(1, "", "sbatch: error: Invalid account or account/partition")
            self.next += 1
            return CmdResult(0, f"{self.next - 1}\n")
        return CmdResult(0)

    def sbatches(self) -> list[tuple[str, list[str]]]:
        """Each sbatch's script and options, after the comment all of one submit carry."""
        calls = [c for c in self.calls if c[0] == "sbatch"]
        assert len({c[2] for c in calls}) == 1 and calls[0][2].startswith("--comment=tsb-submit-")
        return [(Path(c[-1]).name, c[3:-1]) for c in calls]


def test_a_batch_submits_each_prerequisite_once_and_the_arrays_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.process import slurm_submit

    other = COMPILE_KEY.replace("/wheel", "/wheel2") + " --benchmarks"
    folder = chain_folder(tmp_path, [COMPILE_KEY, COMPILE_KEY, other, COMPILE_KEY])
    fake = FakeSbatch()
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    said: list[str] = []
    batch = slurm_submit.submit_batch(folder, say=said.append)
    dep = "--kill-on-invalid-dep=yes"
    # one import for all, one compile per key, then one array of the three jobs of one
    # compile and the other job alone, each after its own compile and the import
    assert fake.sbatches() == [
        ("import.slurm", []),
        ("compile.slurm", ["--dependency=afterok:100,singleton", dep]),
        ("compile.slurm", ["--dependency=afterok:100,singleton", dep]),
        ("batch_array0.slurm", ["--dependency=afterok:100:101", dep]),
        ("x.slurm", ["--dependency=afterok:100:102", dep]),
    ]
    first_compile = [c for c in fake.calls if c[-1].endswith("compile.slurm")]
    assert [Path(c[-1]).parent.name for c in first_compile] == ["job0", "job2"]
    assert not [c for c in fake.calls if c[0] == "scancel"]
    assert "submitted import job 100 for 4 job(s)" in said
    assert "submitted compile job 101 for 3 job(s)" in said
    assert any(s.startswith("submitted array 103: 3 jobs of one shape after import job 100, compile job 101") for s in said)  # fmt: skip
    # batch_submission.json: the three prerequisites once, each job's ids
    data = json.loads((folder / BATCH_SUBMISSION).read_text())
    assert [(p["kind"], p["job_id"]) for p in data["prerequisites"]] == [
        ("import", "100"),
        ("compile", "101"),
        ("compile", "102"),
    ]
    assert data["prerequisites"][1]["log_file"] == str(folder / "job0" / "job0_compile_101.out")
    assert [j["prerequisites"] for j in data["jobs"]] == [
        ["100", "101"],
        ["100", "101"],
        ["100", "102"],
        ["100", "101"],
    ]
    assert batch.prerequisites == data["prerequisites"]
    # each job's submission.json, as single-job submit writes it: the first user owns them
    subs = [json.loads((folder / f"job{i}" / "submission.json").read_text()) for i in range(4)]
    assert [[(p["job_id"], p.get("shared", False)) for p in s["prerequisites"]] for s in subs] == [
        [("100", False), ("101", False)],
        [("100", True), ("101", True)],
        [("100", True), ("102", False)],
        [("100", True), ("101", True)],
    ]
    assert [s["job_id"] for s in subs] == ["103_0", "103_1", "104", "103_2"]


def test_compiles_differing_only_in_their_wheel_folder_get_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.process import slurm_submit

    keys = [COMPILE_KEY.replace("/wheel", f"/w{i}/wheel") for i in range(2)]
    keys.append(COMPILE_KEY + " --benchmarks")  # another build: not counted
    folder = chain_folder(tmp_path, keys)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", FakeSbatch())
    said: list[str] = []
    slurm_submit.submit_batch(folder, say=said.append)
    assert (
        "note: 2 compile jobs differ only in their wheel folder; set wheel_dir in the base "
        "request to build once for the whole batch"
    ) in said


def test_two_builds_into_one_wheel_folder_are_refused_before_anything_is_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each compile empties the folder and leaves its wheel there: the jobs of one build would
    install the other's wheel (or find none)."""
    from trtllm_script_builder.errors import BuildError
    from trtllm_script_builder.process import slurm_submit

    b200 = COMPILE_KEY.replace("90-real", "100-real")
    folder = chain_folder(tmp_path, [COMPILE_KEY, b200, COMPILE_KEY])
    fake = FakeSbatch()
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    with pytest.raises(BuildError) as exc:
        slurm_submit.submit_batch(folder)
    assert str(exc.value) == (
        "error: wheel_dir: 2 different compiles of the batch build into /wheel (job0: /repo "
        "/sqsh/img.sqsh --cuda_architectures 90-real; job1: /repo /sqsh/img.sqsh "
        "--cuda_architectures 100-real), and each empties it for its own wheel, so a job could "
        "install the other's; give the jobs of each build a wheel_dir of their own, or build "
        "them alike"
    )
    assert fake.calls == []
    assert not (folder / BATCH_SUBMISSION).exists()


@pytest.mark.parametrize("fail", ["compile.slurm", "batch_array0.slurm"])
def test_a_refused_sbatch_cancels_everything_the_submit_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: str
) -> None:
    from trtllm_script_builder.errors import ToolFailed
    from trtllm_script_builder.process import slurm_submit

    folder = chain_folder(tmp_path, [COMPILE_KEY, COMPILE_KEY])
    fake = FakeSbatch(fail=fail)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    with pytest.raises(ToolFailed, match="Invalid account") as exc:
        slurm_submit.submit_batch(folder)
    started = ["100"] if fail == "compile.slurm" else ["100", "101"]
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", *started]]
    assert f"cancelled the {len(started)} already submitted" in str(exc.value)
    assert not (folder / BATCH_SUBMISSION).exists()
    assert not list(folder.glob("*/submission.json"))


SOCKET_TIMEOUT = (
    "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
)


class Unanswered(FakeSbatch):
    """sbatch of `fail` submits its job (as a busy slurmctld does after the client gave up,
    unless `made` is False) yet names none: it printed `said` and exited `rc`. As Slurm's
    src/sbatch/sbatch.c (SchedMD/slurm, 00af9a4a119ee2753152f0a95625a2385766a490) does: on an
    error other than queue full, nodes busy or EAGAIN it prints "Batch job submission failed:"
    with the error's text and exits at once, without a job id. squeue lists the
    user's jobs as `-o '%F %k'` or `'%A %k'` asks (an array's running task has an id of its own
    in `%A`), or does not answer; the user has a job without a comment and one of another
    submit."""

    def __init__(
        self,
        fail: str,
        squeue_rc: int = 0,
        rc: int = 1,
        said: str = SOCKET_TIMEOUT,
        made: bool = True,
    ) -> None:
        super().__init__()
        self.fail_on, self.squeue_rc, self.rc, self.said, self.made = (
            fail,
            squeue_rc,
            rc,
            said,
            made,
        )
        self.queued = [("55", "55", "(null)"), ("56", "56", "tsb-submit-0123456789abcdef")]

    def __call__(self, argv: Any, cwd: Any = None, **k: Any) -> CmdResult:
        argv = list(argv)
        if argv[0] == "squeue":
            self.calls.append(argv)
            base = argv[argv.index("-o") + 1] == "%F %k"
            rows = "".join(f"{b if base else e} {c}\n" for b, e, c in self.queued)
            return CmdResult(self.squeue_rc, rows if self.squeue_rc == 0 else "")
        got = super().__call__(argv, cwd, **k)
        if argv[0] == "sbatch":
            job, mark = got.out.strip(), argv[2].removeprefix("--comment=")
            lost = argv[-1].endswith(self.fail_on)
            if self.made or not lost:
                # a running array task: `%A` shows it as job 110
                element = "110" if "batch_array" in argv[-1] else job
                self.queued.append((job, element, mark))
            if lost:
                return CmdResult(self.rc, "", self.said, b"", self.rc == 124)
        return got


@pytest.mark.parametrize(
    ("fail", "rc", "said"),
    [
        ("import.slurm", 1, SOCKET_TIMEOUT),
        ("x.slurm", 1, SOCKET_TIMEOUT),
        ("x.slurm", 124, "sbatch: no answer after 120s"),
        ("x.slurm", 0, ""),
    ],
)
def test_a_job_whose_sbatch_named_none_is_found_by_its_comment_and_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: str, rc: int, said: str
) -> None:
    """Decision sbatch-without-answer: the job was made all the same; nothing of this submit
    is left running, and nothing else is cancelled (the user's job 55 without a comment, 56 of
    another submit, the array's running task by another id)."""
    from trtllm_script_builder.errors import ToolFailed
    from trtllm_script_builder.process import slurm_submit

    other = COMPILE_KEY.replace("/wheel", "/wheel2") + " --benchmarks"
    folder = chain_folder(tmp_path, [COMPILE_KEY, COMPILE_KEY, other])
    fake = Unanswered(fail, rc=rc, said=said)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    with pytest.raises(ToolFailed) as exc:
        slurm_submit.submit_batch(folder)
    made = ["100"] if fail == "import.slurm" else ["100", "101", "102", "103", "104"]
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", *made]]
    assert str(exc.value).startswith(
        f"error: sbatch: {said or 'exit status 0'}; cancelled the {len(made)} already submitted "
        f"(job {made[-1]} by this submit's comment: its sbatch named none); check the job"
    )
    assert not (folder / BATCH_SUBMISSION).exists()


def test_a_refusal_is_an_answer_and_no_job_is_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.errors import ToolFailed
    from trtllm_script_builder.process import slurm_submit

    folder = chain_folder(tmp_path, [COMPILE_KEY, COMPILE_KEY])
    fake = Unanswered("compile.slurm", said="sbatch: error: Invalid account or account/partition")
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    with pytest.raises(ToolFailed) as exc:
        slurm_submit.submit_batch(folder)
    assert not [c for c in fake.calls if c[0] == "squeue"]
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "100"]]
    assert str(exc.value).startswith(
        "error: sbatch: sbatch: error: Invalid account or account/partition; cancelled the 1 "
        "already submitted; check the job"
    )


@pytest.mark.parametrize(("squeue_rc", "made"), [(1, True), (0, False)])
def test_an_unanswered_sbatch_whose_job_squeue_does_not_show_says_how_to_find_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, squeue_rc: int, made: bool
) -> None:
    """squeue is asked again while slurmctld may still be working through the request."""
    from trtllm_script_builder.errors import ToolFailed
    from trtllm_script_builder.process import slurm_submit

    folder = chain_folder(tmp_path, [COMPILE_KEY, COMPILE_KEY])
    from trtllm_script_builder.process.host import current_user

    fake = Unanswered("compile.slurm", squeue_rc=squeue_rc, made=made)
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    monkeypatch.setattr(slurm_submit, "LOST_JOB_PAUSES", (0.0, 0.0, 0.0))
    with pytest.raises(ToolFailed) as exc:
        slurm_submit.submit_batch(folder)
    assert len([c for c in fake.calls if c[0] == "squeue"]) == 3
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "100"]]
    mark = fake.queued[-1][2]
    assert (
        "; cancelled the 1 already submitted; sbatch may have submitted a job all the same: "
        f"`squeue -u {current_user()} -o '%F %k'` shows it with the comment {mark}; once "
        "slurmctld answers, scancel the job that squeue line shows, then submit again"
    ) in str(exc.value)


def test_a_submit_interrupted_in_sbatch_cancels_the_job_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while sbatch runs: whether it submitted is known only from the comment."""
    from trtllm_script_builder.process import slurm_submit

    folder = chain_folder(tmp_path, [COMPILE_KEY, COMPILE_KEY])
    fake = Unanswered("none")
    real = fake.__call__

    def interrupted(argv: Any, cwd: Any = None, **k: Any) -> CmdResult:
        got = real(argv, cwd, **k)
        if list(argv)[0] == "sbatch" and str(list(argv)[-1]).endswith("compile.slurm"):
            raise KeyboardInterrupt  # after slurmctld took the job, before sbatch said so
        return got

    monkeypatch.setattr("trtllm_script_builder.process.host.run", interrupted)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        slurm_submit.submit_batch(folder, say=said.append)
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "100", "101"]]
    assert said[-1] == (
        "cancelled the 2 already submitted (job 101 by this submit's comment: its sbatch "
        "named none)"
    )


def chain_batch(tmp_path: Path, compile_log: str) -> Path:
    """A submitted batch of two array tasks waiting for import 300 and compile 301."""
    folder = make_batch(tmp_path, [("test_a", "7"), ("test_b", "7")])
    data = json.loads((folder / BATCH_SUBMISSION).read_text())
    work = folder / "test_a"
    data["prerequisites"] = [
        {"kind": "import", "key": IMPORT_KEY, "job_id": "300",
         "log_file": str(work / "imp_300.out"), "err_file": str(work / "imp_300.err")},
        {"kind": "compile", "key": COMPILE_KEY, "job_id": "301",
         "log_file": str(work / "cc_301.out"), "err_file": str(work / "cc_301.err")},
    ]  # fmt: skip
    for job in data["jobs"]:
        job["prerequisites"] = ["300", "301"]
    (folder / BATCH_SUBMISSION).write_text(json.dumps(data))
    (work / "imp_300.out").write_text("Job 300 started\nImporting docker://img\n")
    (work / "cc_301.out").write_text(compile_log)
    return folder


COMPILE_ERROR = (
    "Job 301 started on n1\n"
    "[ 45%] Building CUDA object kernels/topk.cu.o\n"
    '/repo/cpp/topk.cu(42): error: identifier "k" is undefined\n'
    "FAILED: kernels/CMakeFiles/kernels_src.dir/topk.cu.o\n"
    "error: the build failed\n"
)


def test_a_failed_compile_is_every_waiting_jobs_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_batch(tmp_path, COMPILE_ERROR)
    # the test tasks are cancelled by their dependency a poll before the compile leaves the
    # queue (it is still COMPLETING): they wait for the compile's verdict, not CANCELLED
    fake = FakeSlurm(
        {
            "300": ["RUNNING", "COMPLETED"],
            "301": ["PENDING", "RUNNING", "RUNNING", "FAILED"],
            "7_0": ["PENDING", "PENDING", "CANCELLED"],
            "7_1": ["PENDING", "PENDING", "CANCELLED"],
        },
        {"300": "300", "301": "301", "7_0": "7", "7_1": "7"},
    )
    result, err = run_watch(folder, fake, monkeypatch)
    squeues = [c for c in fake.calls if c[0] == "squeue"]
    assert squeues[0][squeues[0].index("-j") + 1] == "300,301,7_0,7_1"  # one query for all
    assert [r.verdict for r in result.jobs] == [Verdict.COMPILE_FAILED] * 2
    assert result.exit_status == 16
    data = json.loads((folder / "results.json").read_text())
    assert data["summary"] == {"jobs": 2, "verdicts": {"COMPILE_FAILED": 2}, "exit_status": 16}
    assert [(p["kind"], p["verdict"]) for p in data["prerequisites"]] == [
        ("import", "PASSED"),
        ("compile", "COMPILE_FAILED"),
    ]
    for row in data["jobs"]:
        assert "the compile job 301 failed, so the test job never started" in row["reason"]
        assert row["evidence"][1] == (
            'cc_301.out:3: /repo/cpp/topk.cu(42): error: identifier "k" is undefined'
        )
    verdict = json.loads((folder / "test_b" / "verdict.json").read_text())
    assert verdict["verdict"] == "COMPILE_FAILED" and verdict["job_id"] == "301"
    assert verdict["evidence"][-1] == "test job 7_1 cancelled before it started"
    assert [(c["kind"], c["verdict"]) for c in verdict["chain"]] == [
        ("import", "PASSED"),
        ("compile", "COMPILE_FAILED"),
        ("test", None),
    ]
    assert "0 other; import job 300 RUNNING; compile job 301 PENDING" in err
    assert (
        "[watch] COMPILE_FAILED: accuracy/test_x.py::test_a (job 7_0: the compile job 301 failed"
        in err
    )
    # the tasks had left the queue already: nothing to cancel
    assert not [c for c in fake.calls if c[0] == "scancel"]
    out = batch_results.render_results(result)
    assert out.count('error: identifier "k" is undefined') == 1  # the compile's, once


def test_a_failed_import_cancels_the_jobs_still_waiting_and_the_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_batch(tmp_path, "")
    fake = FakeSlurm(
        {"300": ["RUNNING", "FAILED"], "301": ["PENDING"], "7_0": ["PENDING"], "7_1": ["PENDING"]},
        {"300": "300", "301": "301", "7_0": "7", "7_1": "7"},
    )
    result, _ = run_watch(folder, fake, monkeypatch)
    # a Slurm that kept them pending (DependencyNeverSatisfied): watch cancels them, and the
    # compile no job waits for any more
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "7_0", "7_1", "301"]]
    assert [r.verdict for r in result.jobs] == [Verdict.INFRA_FAILURE] * 2
    assert result.exit_status == Verdict.INFRA_FAILURE.exit_code
    assert "the import job 300" in result.jobs[0].decision.reason


def test_a_passed_chain_lets_the_tests_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_batch(tmp_path, "[100%] Built target\nBuilt wheel /wheel/t.whl\n")
    write_logs(folder, "test_a", "8", ok=True)
    write_logs(folder, "test_b", "9", ok=False)
    fake = FakeSlurm(
        {
            "300": ["COMPLETED"],
            "301": ["RUNNING", "COMPLETED"],
            "7_0": ["PENDING", "PENDING", "RUNNING", "COMPLETED"],
            "7_1": ["PENDING", "PENDING", "RUNNING", "FAILED"],
        },
        {"300": "300", "301": "301", "7_0": "8", "7_1": "9"},
    )
    result, err = run_watch(folder, fake, monkeypatch)
    assert [r.verdict for r in result.jobs] == [Verdict.PASSED, Verdict.FAILED]
    assert result.exit_status == 1
    verdict = json.loads((folder / "test_a" / "verdict.json").read_text())
    assert verdict["job_id"] == "8"
    assert [(c["kind"], c["verdict"]) for c in verdict["chain"]] == [
        ("import", "PASSED"),
        ("compile", "PASSED"),
    ]
    assert "[watch] compile job 301 PASSED" in err


def test_timeout_cancels_the_prerequisites_with_the_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = chain_batch(tmp_path, "[ 10%] Building CXX object a.o\n")
    fake = FakeSlurm(
        {"300": ["COMPLETED"], "301": ["RUNNING"], "7_0": ["PENDING"], "7_1": ["PENDING"]},
        {"300": "300", "301": "301", "7_0": "7", "7_1": "7"},
    )
    result, err = run_watch(folder, fake, monkeypatch, timeout=3.0)
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "301", "7_0", "7_1"]]
    assert "timeout after 3s: cancelling 3 job(s)" in err
    assert [r.verdict for r in result.jobs] == [Verdict.TIMEOUT] * 2
    assert result.exit_status == Verdict.TIMEOUT.exit_code
    assert "the compile job 301" in result.jobs[0].decision.reason


@pytest.mark.parametrize("obeyed", [True, False])
def test_an_import_nobody_needs_any_more_is_cancelled_and_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, obeyed: bool
) -> None:
    """The compile failed while the image import still runs: every test job has its verdict,
    the import is cancelled, and watch ends once it left the queue (or, when the cancel is
    not obeyed, after CANCEL_WAIT), so a failed batch leaves nothing running."""
    folder = chain_batch(tmp_path, COMPILE_ERROR)
    fake = FakeSlurm(
        {
            "300": ["RUNNING"],
            "301": ["RUNNING", "FAILED"],
            "7_0": ["PENDING", "CANCELLED"],
            "7_1": ["PENDING", "CANCELLED"],
        },
        {"300": "300", "301": "301", "7_0": "7", "7_1": "7"},
    )
    if not obeyed:
        monkeypatch.setattr(fake, "state", lambda job: fake.states[job][-1])
    result, err = run_watch(folder, fake, monkeypatch)
    cancels = [c for c in fake.calls if c[0] == "scancel"]
    assert cancels == [["scancel", "300"]]
    after = fake.calls[fake.calls.index(cancels[0]) + 1 :]
    assert [c for c in after if c[0] == "squeue"], "watch ended without asking again"
    data = json.loads((folder / "results.json").read_text())
    assert [r.verdict for r in result.jobs] == [Verdict.COMPILE_FAILED] * 2
    kinds = [(p["kind"], p["verdict"]) for p in data["prerequisites"]]
    if obeyed:
        assert kinds == [("import", "CANCELLED"), ("compile", "COMPILE_FAILED")]
        assert result.elapsed < watch_mod.CANCEL_WAIT
    else:
        assert kinds[1] == ("compile", "COMPILE_FAILED")
        assert result.elapsed >= watch_mod.CANCEL_WAIT


def test_a_remote_batch_reads_the_compiles_log_as_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ssh a test job's logs are read once, at its end; the compile's log at every poll,
    so that the progress line shows how far the build got."""
    folder = chain_batch(tmp_path, "[ 10%] Building CXX object a.o\n[ 62%] Linking b\n")
    data = json.loads((folder / BATCH_SUBMISSION).read_text())
    data.update(scenario="remote_slurm", ssh_host="login1")
    (folder / BATCH_SUBMISSION).write_text(json.dumps(data))
    fake = FakeSlurm(
        {"300": ["COMPLETED"], "301": ["RUNNING"], "7_0": ["PENDING"], "7_1": ["PENDING"]},
        {"300": "300", "301": "301", "7_0": "7", "7_1": "7"},
    )
    reads: list[str] = []

    class Ssh:
        remote = True
        name = "login1"

        def __init__(self, target: Any) -> None:
            assert target == "login1"

        def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
            return fake(argv, cwd)

        def read_from(self, path: str, offset: int) -> bytes | None:
            reads.append(Path(path).name)
            return read_local(path, offset)

    monkeypatch.setattr(host, "host_for", lambda name: Ssh(name) if name else host.Here())
    shown: list[str] = []
    monkeypatch.setattr(
        watch_mod, "progress", lambda *a: shown.append(real_progress(*a)) or shown[-1]
    )
    run_watch(folder, fake, monkeypatch, timeout=3.0)
    assert reads.count("cc_301.out") >= 2, reads  # every poll while it runs
    assert not [r for r in reads if r.startswith("test_")], reads
    assert any(line.endswith("compile job 301 RUNNING, built 62%") for line in shown), shown


real_progress = batch_results.progress


def test_the_progress_line_shows_the_compiles_percent(tmp_path: Path) -> None:
    from trtllm_script_builder.process.chain import ChainJob, PrerequisiteJob

    log = tmp_path / "cc_301.out"
    log.write_text("[  9%] Building CXX object a.o\n[ 45%] Building CUDA object b.o\n")
    job = ChainJob("compile", COMPILE_KEY, "301", str(log), None)
    handle = PrerequisiteJob(job, FakeSlurm({}, {}), read_local, "h")
    handle.logs()
    handle.update(slurm.JobStatus("301", state="RUNNING"))
    done = Prerequisite(job.kind, job.job_id, handle)
    line = batch_results.progress(SimpleNamespace(tracked=[], prereqs=[done]))  # type: ignore[arg-type]
    assert (
        line
        == "[watch] 0/0 done, 0 running, 0 pending, 0 passed, 0 failed, 0 other; compile job 301 RUNNING, built 45%"
    )


class FakeSsh(FakeSbatch):
    """SshRunner of a remote batch: check, copy and remote commands, all recorded in order;
    shell lines run here (the log folders' check)."""

    remote = True
    name = "login1"

    def __init__(self, target: Any) -> None:
        super().__init__()
        self.target = target
        self.events: list[str] = []
        FakeSsh.made.append(self)

    made: list[FakeSsh] = []

    def check(self) -> CmdResult:
        self.events.append("check")
        return CmdResult(0, "/home/u\n/home/u\n")

    def copy(self, files: list[Path], remote_dir: str) -> CmdResult:
        self.events.append(f"copy {remote_dir}")
        return CmdResult(0)

    def shell(self, line: str, input: Any = None, **_: Any) -> CmdResult:
        self.events.append("shell")
        return shell_here(line, input)

    def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
        self.events.append(f"{argv[0]} in {cwd}")
        return super().__call__(argv, cwd)


def remote_chain_folder(tmp_path: Path, count: int, roots: list[str] | None = None) -> Path:
    """chain_folder's batch of `count` jobs made remote_slurm jobs on login1 (job i in
    /remote/batch/job<i>), job i of checkout roots[i] where roots are given."""
    folder = chain_folder(tmp_path, [COMPILE_KEY] * count)
    for i in range(count):
        path = folder / f"job{i}" / "job_spec.json"
        spec = json.loads(path.read_text())
        remote = f"/remote/batch/job{i}"
        spec.update(
            execution_scenario="remote_slurm",
            ssh_host="login1",
            remote_repo_path="/remote/TensorRT-LLM",
            remote_work_dir=remote,
            remote_script_path=f"{remote}/x.slurm",
        )
        if roots is not None:
            spec["repo_root"] = roots[i]
        for p in spec["prerequisites"]:
            p["remote_script_path"] = f"{remote}/{Path(p['script_path']).name}"
        path.write_text(json.dumps(spec))
    return folder


def test_a_remote_batch_syncs_each_checkout_once_and_submits_the_remote_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.process import slurm_submit

    folder = remote_chain_folder(tmp_path, 3)
    synced: list[tuple[str, str | None, str, Any]] = []

    def sync_for_compile(spec: Any, work_dir: Path, say: Any) -> Any:
        def sync(target: Any) -> None:
            synced.append((spec.repo_root, spec.remote_repo_path, work_dir.name, target))
            FakeSsh.made[-1].events.append("sync")

        return sync

    FakeSsh.made = []
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", FakeSsh)
    monkeypatch.setattr(slurm_submit, "_sync_for_compile", sync_for_compile)
    batch = slurm_submit.submit_batch(folder)
    (ssh,) = FakeSsh.made
    # once for the three, named after the first job's folder (its `sync --force` hint)
    assert synced == [("/ROOT/repo", "/remote/TensorRT-LLM", "job0", SshTarget(ssh.target))]
    # the log folders checked first (one command for all), then the sync, then the copies,
    # then the import and compile from the first job's remote folder and the array after them
    assert ssh.events[:3] == ["check", "shell", "sync"]
    assert ssh.events.count("shell") == 1
    assert [e for e in ssh.events if e.startswith("sbatch")] == [
        "sbatch in /remote/batch/job0",
        "sbatch in /remote/batch/job0",
        "sbatch in /remote/batch",
    ]
    assert ssh.events.index("copy /remote/batch/job2") < ssh.events.index(
        "sbatch in /remote/batch/job0"
    )
    assert [c[-1] for c in ssh.calls if c[0] == "sbatch"] == [
        "/remote/batch/job0/import.slurm",
        "/remote/batch/job0/compile.slurm",
        "/remote/batch/batch_array0.slurm",
    ]
    assert batch.prerequisites is not None
    assert batch.prerequisites[1]["log_file"] == "/remote/batch/job0/job0_compile_101.out"
    sub = json.loads((folder / "job2" / "submission.json").read_text())
    assert [p["job_id"] for p in sub["prerequisites"]] == ["100", "101"]
    assert sub["ssh_host"] == "login1"


def test_a_timeout_during_the_import_decides_both_prerequisites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class SlowCancel(FakeSlurm):
        """The compile leaves the queue two polls after its scancel, the others at once."""

        at = -1

        def state(self, job: str) -> str:
            if job == "301" and job in self.cancelled and self.polls <= self.at + 2:
                return "PENDING"
            return super().state(job)

        def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
            if argv[0] == "scancel":
                self.at = self.polls
            return super().__call__(argv, cwd)

    folder = chain_batch(tmp_path, "")
    fake = SlowCancel(
        {"300": ["RUNNING"], "301": ["PENDING"], "7_0": ["PENDING"], "7_1": ["PENDING"]},
        {"300": "300", "301": "301", "7_0": "7", "7_1": "7"},
    )
    result, _ = run_watch(folder, fake, monkeypatch, timeout=2.0)
    assert [c for c in fake.calls if c[0] == "scancel"] == [["scancel", "300", "301", "7_0", "7_1"]]
    assert [r.verdict for r in result.jobs] == [Verdict.TIMEOUT] * 2
    assert result.jobs[0].decision.reason.startswith("the import job 300: ")
    data = result.to_json()
    assert [(p["verdict"], p["cancelled_by_watch"]) for p in data["prerequisites"]] == [
        ("TIMEOUT", "timeout"),
        ("TIMEOUT", "timeout"),
    ]


def test_an_unreadable_batch_record_is_one_line(tmp_path: Path) -> None:
    """Not UTF-8, or not the record's shape: the same refusal as a job's submission.json."""
    from trtllm_script_builder.errors import BuildError
    from trtllm_script_builder.process.slurm_submit import load_batch_submission

    assert load_batch_submission(tmp_path) is None
    for text in (b"\xff\xfe{", b'{"jobs": 3}'):
        (tmp_path / BATCH_SUBMISSION).write_bytes(text)
        with pytest.raises(BuildError) as err:
            load_batch_submission(tmp_path)
        assert err.value.field == "work_dir" and "cannot be read (" in err.value.problem
        assert "\n" not in err.value.problem


def test_ssh_host_on_a_local_batch_is_refused(tmp_path: Path) -> None:
    """Its jobs run on this machine's cluster: asking a login node about them would be wrong."""
    folder = make_batch(tmp_path, [("test_a", "7")])
    with pytest.raises(BuildError) as info:
        watch_batch(folder, console=Console(io.StringIO(), io.StringIO()), ssh_host="login1")
    assert str(info.value).startswith("error: ssh_host: the batch is local_slurm"), str(info.value)
