"""What every renderer returns, and the job_spec fields they share."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtllm_script_builder.model.jobspec import JobSpec, OutFile, SlurmParams
from trtllm_script_builder.resolve.compile import CompileStep
from trtllm_script_builder.resolve.resolved import ResolvedJob


@dataclass
class SubmitStep:
    """Category 4's finishing step: files submit.py needs first, its arguments, the rewrite."""

    repo_root: str
    before: list[OutFile]
    args: list[str]
    launch_sh: Path
    rewrite: dict[str, str] | None = None
    gpu_lines: tuple[str, ...] | None = None


@dataclass
class BuildResult:
    spec: JobSpec
    files: list[OutFile]
    work_dir: Path
    warnings: list[str] = field(default_factory=list)
    submit: SubmitStep | None = None


def spec_common(job: ResolvedJob) -> dict[str, Any]:
    return {
        "workflow_type": job.workflow,
        "category": job.category,
        "model_name": job.model_name,
        "execution_scenario": job.scenario,
        "container_image": job.image,
        "docker_image": job.image,
        "success_patterns": list(job.success_patterns),
        "failure_patterns": list(job.failure_patterns),
        "required_devices": job.required_devices,
        "node_count": job.nodes,
        "work_dir": job.work_dir,
        "repo_root": job.repo_root,
        "llm_models_root": job.models_root,
        "extra_files": list(job.extra_files),
        "warnings": list(job.warnings),
    }


def scenario_fields(job: ResolvedJob, script: str) -> dict[str, Any]:
    """Remote fields for a job reached over ssh only; persistent-mode fields for a held
    allocation only."""
    paths = job.paths
    if paths.remote:
        return {
            "remote_repo_path": paths.project,
            "remote_work_dir": paths.log_dir,
            "remote_script_path": posixpath.join(paths.log_dir, script),
            "ssh_host": job.ssh_host,
        }
    if job.persistent:
        return {
            "persistent_mode": True,
            "container_name": job.container_name,
            "container_mounts": job.mounts_text,
        }
    return {}


def slurm_params(job: ResolvedJob) -> SlurmParams:
    assert job.slurm is not None
    return job.slurm


def prerequisites(job: ResolvedJob) -> list[dict[str, str]] | None:
    """job_spec's prerequisites: the chain's jobs, in the order `submit` starts them."""
    if job.chain is None:
        return None
    out = []
    for step in job.chain.steps():
        entry = {
            "kind": step.kind,
            "key": step.key,
            "script_name": step.script,
            "script_path": str(Path(job.work_dir) / step.script),
            "log_file_pattern": f"{step.name}_%j.out",
            "error_file_pattern": f"{step.name}_%j.err",
            "output": step.wheel_dir if isinstance(step, CompileStep) else step.sqsh,
        }
        if job.paths.remote:
            entry["remote_script_path"] = posixpath.join(job.paths.log_dir, step.script)
        out.append(entry)
    return out
