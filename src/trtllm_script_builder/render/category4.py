"""Category 4's renderer: job_spec.json and the submit.py step that writes the launch script."""

from __future__ import annotations

from pathlib import Path

from trtllm_script_builder.model.jobspec import JobSpec, OutFile
from trtllm_script_builder.render.spec import (
    BuildResult,
    SubmitStep,
    scenario_fields,
    slurm_params,
    spec_common,
)
from trtllm_script_builder.resolve.resolved import ResolvedJob


def render_category4(job: ResolvedJob) -> BuildResult:
    """The launch script comes from submit.py when the result is written (the finishing step)."""
    plan = job.submit
    assert plan is not None
    work_dir = Path(job.work_dir)
    spec = JobSpec(
        script_path=str(work_dir / plan.launch_sh),
        script_name=plan.launch_sh,
        # in work_dir, as the launch script writes (decision relative-log-patterns)
        log_file_pattern="slurm-%j.out",
        slurm_params=slurm_params(job),
        slurm_env=job.cluster_raw,
        **spec_common(job),
        **scenario_fields(job, plan.launch_sh),
    )
    step = SubmitStep(
        job.repo_root,
        list(plan.before),
        list(plan.args),
        work_dir / plan.launch_sh,
        dict(plan.rewrite) if plan.rewrite else None,
        plan.gpu_lines,
    )
    files = [OutFile("job_spec.json", spec.to_json())]
    return BuildResult(spec, files, work_dir, list(job.warnings), step)
