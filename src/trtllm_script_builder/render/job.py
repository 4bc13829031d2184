"""render(ResolvedJob) -> BuildResult: the script, its helpers and job_spec.json, from the
resolved job alone (no request, no disk)."""

from __future__ import annotations

import posixpath
import shlex
from pathlib import Path

from trtllm_script_builder import __version__
from trtllm_script_builder.model.jobspec import CATEGORY_TITLES, JobSpec, OutFile
from trtllm_script_builder.render import render
from trtllm_script_builder.render.category4 import render_category4
from trtllm_script_builder.render.chain import render_chain
from trtllm_script_builder.render.spec import (
    BuildResult,
    prerequisites,
    scenario_fields,
    slurm_params,
    spec_common,
)
from trtllm_script_builder.resolve.resolved import ResolvedJob
from trtllm_script_builder.resolve.workflow import workflow


def render_job(job: ResolvedJob) -> BuildResult:
    if job.submit is not None:
        return render_category4(job)
    if job.slurm is None:
        return _docker_result(job)
    return _slurm_result(job)


def _result(job: ResolvedJob, files: list[OutFile], spec: JobSpec) -> BuildResult:
    files = [*files, OutFile("job_spec.json", spec.to_json())]
    return BuildResult(spec, files, Path(job.work_dir), list(job.warnings))


def _title(job: ResolvedJob) -> str:
    return f"{CATEGORY_TITLES[job.category]} for {job.model_name} ({job.workflow}, {job.scenario})"


def _docker_result(job: ResolvedJob) -> BuildResult:
    script = "docker_cmd.sh"
    args, payload = _docker(job)
    docker_cmd = shlex.join(
        ["docker", "run", *[w for line in args for w in line], "bash", "-c", payload]
    )
    text = render(
        "docker_cmd.sh.j2",
        s={"title": _title(job), "version": __version__, "docker_args": args, "payload": payload},
    )
    work_dir = Path(job.work_dir)
    spec = JobSpec(
        script_path=str(work_dir / script),
        script_name=script,
        log_file=str(work_dir / f"{job.model_name}_local.log"),
        junit_file_pattern=job.junit_file or None,
        docker_cmd=docker_cmd,
        **spec_common(job),
    )
    return _result(job, [OutFile(script, text, executable=True)], spec)


def _docker(job: ResolvedJob) -> tuple[list[list[str]], str]:
    """The job's variables passed with `--env`, for the fixed payload to read."""
    from trtllm_script_builder.render.docker import docker_run

    d = dict(job.exports)
    env = [("PROJECT_PATH", job.paths.project), ("LLM_MODELS_ROOT", job.models_root)]
    custom_env = bool(d.get("CUSTOM_ENV"))
    if custom_env:
        env.append(("CUSTOM_ENV", d["CUSTOM_ENV"]))
    for name in ("WHEEL_PATH", "PYTEST_ADDOPTS"):
        if name in d:
            env.append((name, d[name]))
    if job.prep_cmd:
        env.append(("PREP_CMD", job.prep_cmd))
    env += [("RUN_WORKDIR", d.get("TEST_WORKDIR", job.paths.project)), ("RUN_CMD", job.run_cmd)]
    if job.junit_file:
        env.append(("JUNIT_FILE", posixpath.join(job.paths.log_dir, job.junit_file)))
    return docker_run(
        name=job.container_name,
        image=job.image,
        gpus=job.required_devices,
        mounts=list(job.mounts),
        env=env,
        install=job.install,
        wheel=bool(job.wheel),
        eval_requirements=workflow(job.workflow).eval_requirements,
        custom_env=custom_env,
        has_prep=bool(job.prep_cmd),
        junit=bool(job.junit_file),
    )


def _slurm_result(job: ResolvedJob) -> BuildResult:
    slurm, paths, flow = job.slurm, job.paths, workflow(job.workflow)
    assert slurm is not None
    script = f"{job.name}.slurm"
    # Resolve checked it fits an #SBATCH line; Slurm reads `%` there as a pattern.
    log_dir = paths.log_dir.replace("%", "%%")
    ctx = {
        "title": _title(job),
        "version": __version__,
        "job_name": job.name,
        "log_out": f"{log_dir}/{job.name}_%j.out",
        "log_err": f"{log_dir}/{job.name}_%j.err",
        "nodes": slurm.nodes,
        "ntasks": slurm.ntasks,
        "ntasks_per_node": slurm.ntasks_per_node,
        "gres": slurm.gres,
        "cpus_per_task": slurm.cpus_per_task,
        "mem": slurm.mem,
        # a held allocation's steps share its container until it is released
        "remove_container": not job.persistent,
        "time_limit": slurm.time_limit,
        "partition": slurm.partition,
        "account": slurm.account,
        "image": job.script_image,
        "container_name": job.container_name,
        "mounts": job.mounts_text,
        "project": paths.project,
        "llm_models_root": job.models_root,
        "exports": list(job.exports),
        "install": job.install,
        "wheel": bool(job.wheel),
        "wheel_dir": bool(job.chain and job.chain.compile),
        "eval_requirements": flow.eval_requirements,
        "mpi": job.mpi,
        "mpi_plugin": slurm.mpi_plugin,
        "launcher": job.launcher,
        # across nodes the launcher gets the command as words (decision launcher-words)
        "launch_words": shlex.split(job.run_cmd) if job.launcher else [],
        "has_prep": bool(job.prep_cmd),
        "run_script": job.run_script,
        "junit": _split_job_id(paths.log_dir, job.junit_file) if job.junit_file else None,
    }
    files = [OutFile(script, render(flow.template_name, s=ctx), executable=True)]
    if job.run_script:
        files.append(
            OutFile("slurm_run_custom.sh", render("slurm_run_custom.sh.j2"), executable=True)
        )
    if job.chain is not None:
        files += render_chain(job, ctx)
    work_dir = Path(job.work_dir)
    spec = JobSpec(
        script_path=str(work_dir / script),
        script_name=script,
        prerequisites=prerequisites(job),
        # Relative to work_dir (remote_work_dir remotely): executors join the two
        # (decision relative-log-patterns).
        log_file_pattern=f"{job.name}_%j.out",
        error_file_pattern=f"{job.name}_%j.err",
        junit_file_pattern=job.junit_file or None,
        slurm_params=slurm_params(job),
        slurm_env=job.cluster_raw,
        **spec_common(job),
        **scenario_fields(job, script),
    )
    return _result(job, files, spec)


def _split_job_id(folder: str, name: str) -> tuple[str, str]:
    """The path before and after the name's `%j`, for the script to put the job id between."""
    before, _, after = name.partition("%j")
    return posixpath.join(folder, before), after
