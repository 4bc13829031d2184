"""Persistent allocations ask for what the job needs (its GRES and tasks), and a held one is
reused only when it is at least that large."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model.jobspec import JobSpec, SlurmParams
from trtllm_script_builder.process.persistent import (
    AllocState,
    _tasks_per_node,
    cancel_orphans,
    checkout_mark,
    ensure_allocation,
    load_state,
    reuse_problem,
    save_state,
)
from trtllm_script_builder.process.proc import CmdResult

from .conftest import job_spec


def spec(devices: int, ntasks: int, gres: str | None) -> JobSpec:
    return job_spec(
        workflow_type="eval",
        category=5,
        script_path="/w/m_eval.slurm",
        script_name="m_eval.slurm",
        required_devices=devices,
        slurm_params=SlurmParams(
            partition="gpu",
            account="acct",
            time_limit="01:00:00",
            nodes=1,
            ntasks=ntasks,
            ntasks_per_node=ntasks,
            gpus_per_node=8,
            gres=gres,
            mpi_plugin="pmix",
        ),
    )


def held(gpus: int) -> AllocState:
    return AllocState(
        job_id="7",
        partition="gpu",
        account="acct",
        nodes=1,
        gpus_per_node=gpus,
        docker_image="img",
        allocated_at="2026-12-03T00:00:00+00:00",
        time_limit="04:00:00",
    )


def running(argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
    return CmdResult(0, "RUNNING 3:00:00\n")


def test_the_allocation_holds_the_jobs_gpus_not_the_nodes() -> None:
    assert _tasks_per_node(spec(1, 1, "gpu:1")) == 1  # a one-GPU eval holds one GPU, not 8
    assert _tasks_per_node(spec(2, 1, "gpu:2")) == 2  # custom: one task, two GPUs
    assert _tasks_per_node(spec(4, 4, "gpu:4")) == 4
    assert _tasks_per_node(spec(4, 1, None)) == 4  # no GRES: the job's GPU count


def test_a_held_allocation_is_reused_only_when_large_enough() -> None:
    assert reuse_problem(held(4), spec(2, 2, "gpu:2"), running) is None
    problem = reuse_problem(held(1), spec(2, 2, "gpu:2"), running)
    assert problem == "it holds 1 GPU(s) per node, the job wants 2"


class FakeHost:
    """The cluster's tools as persistent mode asks them: squeue answers from `rows` (job id,
    state, comment, and its user when not `me`) and `steps` (job id -> its running steps);
    every call is recorded."""

    name = "this machine"
    remote = False
    ssh_host = None

    def __init__(self, rows: list[tuple[str, ...]], steps: dict[str, list[str]]) -> None:
        self.rows, self.steps, self.calls = rows, steps, []  # type: list[list[str]]

    def check(self) -> CmdResult:
        return CmdResult(0, "/home/me\n/home/me\nme\n")

    def __call__(self, argv: Sequence[str], cwd: Path | None = None, **_: object) -> CmdResult:
        argv = list(argv)
        self.calls.append(argv)
        if argv[:2] == ["squeue", "-u"]:  # squeue -u: that user's jobs only
            mine = [r for r in self.rows if (r[3:] or ("me",))[0] == argv[2]]
            return CmdResult(0, "".join(f"{r[0]} {r[1]} {r[2]}\n" for r in mine))
        if argv[:3] == ["squeue", "-h", "-s"]:
            return CmdResult(0, "".join(f"{s}\n" for s in self.steps.get(argv[4], [])))
        if argv[:3] == ["squeue", "-h", "-j"] and argv[-1] == "%u %k":  # its user and mark
            rows = [r for r in self.rows if r[0] == argv[3]]
            return CmdResult(0, "".join(f"{(r[3:] or ('me',))[0]} {r[2]}\n" for r in rows))
        if argv[:3] == ["squeue", "-h", "-j"]:
            return CmdResult(0, "RUNNING 3:00:00\n")
        return CmdResult(0, "")

    def cancelled(self) -> list[str]:
        return [c[1] for c in self.calls if c[0] == "scancel"]


def test_only_this_checkouts_idle_lost_allocations_are_cancelled(tmp_path: Path) -> None:
    ours, other = tmp_path / "mine", tmp_path / "theirs"
    host = FakeHost(
        [
            ("11", "RUNNING", checkout_mark(other)),  # another checkout's
            ("12", "RUNNING", "(null)"),  # not made by this tool (or by an older one)
            ("13", "RUNNING", checkout_mark(ours)),  # ours, a job running in it
            ("14", "PENDING", checkout_mark(ours)),  # ours, lost by the state file
            ("15", "RUNNING", checkout_mark(ours), "them"),  # another user's, our mark
        ],
        {"13": ["13.0"]},
    )
    said: list[str] = []
    cancel_orphans("acct", ours, host, said.append)  # type: ignore[arg-type]
    assert host.cancelled() == ["14"]
    assert said[:2] == [
        "leaving allocation 11 (RUNNING): another checkout's, or not made by this tool",
        "leaving allocation 12 (RUNNING): another checkout's, or not made by this tool",
    ]
    assert said[2] == "leaving allocation 13 (RUNNING): a job runs in it (13.0)"


def test_a_held_allocation_with_a_job_running_is_not_replaced(tmp_path: Path) -> None:
    job = spec(2, 2, "gpu:2").model_copy(update={"repo_root": str(tmp_path)})
    save_state(tmp_path, held(1))  # too small for the job
    host = FakeHost([("7", "RUNNING", checkout_mark(tmp_path))], {"7": ["7.0"]})
    with pytest.raises(BuildError, match=r"allocation 7 cannot take this job .* runs in it"):
        ensure_allocation(job, None, lambda _: None, host)  # type: ignore[arg-type]
    assert host.cancelled() == []
    assert load_state(tmp_path) is not None  # still recorded, still held


def test_a_new_allocation_carries_the_checkouts_mark(tmp_path: Path) -> None:
    job = spec(1, 1, "gpu:1").model_copy(update={"repo_root": str(tmp_path)})
    host = FakeHost([], {})
    (tmp_path / "work_dirs").mkdir()  # made by the lock of submit_persistent
    with pytest.raises(ToolFailed):  # the fake salloc grants nothing
        ensure_allocation(job, None, lambda _: None, host)  # type: ignore[arg-type]
    (salloc,) = [c for c in host.calls if c[0] == "salloc"]
    assert f"--comment={checkout_mark(tmp_path)}" in salloc


@pytest.mark.parametrize("comment", ["another", "(null)", "another user's"])
def test_a_state_file_naming_an_allocation_of_another_checkout_is_not_acted_on(
    tmp_path: Path, comment: str
) -> None:
    """A checkout copied with its work_dirs (`cp -a`), or a state file another process or user
    wrote: it names an allocation this checkout did not make, or another user's that took this
    checkout's mark as its comment (anyone may). Neither a job that does not fit it nor
    `release` cancels it, and no job of this checkout runs in it."""
    from trtllm_script_builder.process.persistent import release

    mark = {"another": checkout_mark(tmp_path / "original"), "(null)": comment}
    row = ("7", "RUNNING", mark.get(comment, checkout_mark(tmp_path)))
    host = FakeHost([row + (("them",) if comment == "another user's" else ())], {})
    job = spec(2, 2, "gpu:2").model_copy(update={"repo_root": str(tmp_path)})
    said: list[str] = []
    for state in (held(1), held(8)):  # too small: replaced; big enough: reused
        save_state(tmp_path, state)
        with pytest.raises(ToolFailed):  # past the recorded one, to a new salloc
            ensure_allocation(job, None, said.append, host)  # type: ignore[arg-type]
        assert host.cancelled() == []
        assert "reusing allocation 7" not in " ".join(said)
        assert said[0].startswith("leaving allocation 7: the state file names an allocation")
        said.clear()
    save_state(tmp_path, held(1))
    with pytest.raises(BuildError, match="not this checkout's"):
        release(tmp_path, host)  # type: ignore[arg-type]
    assert host.cancelled() == []


@pytest.mark.parametrize("name", [".slurm_alloc.json", ".slurm_alloc.lock"])
def test_a_named_pipe_in_the_state_folder_blocks_no_release(tmp_path: Path, name: str) -> None:
    """A checkout may be a team's: a pipe at the state file or the lock held release (and
    submit --persistent) for ever."""
    import contextlib
    import os
    import threading

    from trtllm_script_builder.process.persistent import release

    (tmp_path / "work_dirs").mkdir()
    fifo = tmp_path / "work_dirs" / name
    os.mkfifo(fifo)
    done = threading.Event()

    def go() -> None:
        with contextlib.suppress(BuildError):
            release(tmp_path, FakeHost([], {}))  # type: ignore[arg-type]
        done.set()

    threading.Thread(target=go, daemon=True).start()
    try:
        assert done.wait(10)
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_the_salloc_log_is_not_written_through_a_link(tmp_path: Path) -> None:
    """A teammate's link at work_dirs/.salloc.log to a file of the victim's: salloc's answer
    overwrote that file."""
    job = spec(1, 1, "gpu:1").model_copy(update={"repo_root": str(tmp_path)})
    (tmp_path / "work_dirs").mkdir()
    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    (tmp_path / "work_dirs" / ".salloc.log").symlink_to(victim)
    with pytest.raises(ToolFailed):
        ensure_allocation(job, None, lambda _: None, FakeHost([], {}))  # type: ignore[arg-type]
    assert victim.read_text() == "mine\n"
    assert not (tmp_path / "work_dirs" / ".salloc.log").is_symlink()
