"""Persistent allocations ask for what the job needs (its GRES and tasks), and a held one is
reused only when it is at least that large."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trtllm_script_builder.model.jobspec import JobSpec, SlurmParams
from trtllm_script_builder.process.persistent import AllocState, _tasks_per_node, reuse_problem
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
