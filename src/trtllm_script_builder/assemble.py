"""Steps 4-5 per category: the script's variables, the files, and the job_spec, from resolved inputs."""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtllm_script_builder import __version__
from trtllm_script_builder.build import (
    PATTERNS,
    SUFFIX,
    BuildResult,
    Paths,
    base_mounts,
    sbatch_value,
    scenario_fields,
)
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec, OutFile, SlurmParams
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.site_config import SiteConfig
from trtllm_script_builder.model.slurm_env import SlurmEnv
from trtllm_script_builder.output.report import CATEGORY_TITLES
from trtllm_script_builder.render import render
from trtllm_script_builder.resolve import image as img
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.commands import (
    find_model_dir,
    parse_custom_env,
    parse_eval,
    replace_option,
)
from trtllm_script_builder.resolve.slurm import ClusterFacts
from trtllm_script_builder.resolve.workflows import Sizing


@dataclass
class Job:
    """What every category's script is made from, once Steps 1-3 are resolved."""

    req: Request
    wf: str
    sz: Sizing
    image: str
    paths: Paths
    models_root: str
    name: str  # <model>_<suffix>: job, container and script name
    mounts: list[mnt.Mount] = field(default_factory=list)
    exports: list[tuple[str, str]] = field(default_factory=list)
    files: list[OutFile] = field(default_factory=list)
    extra_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    run_cmd: str = ""
    prep_cmd: str | None = None
    run_script: str = ""  # custom on Slurm: the in-job path of slurm_run_custom.sh

    @property
    def work_dir(self) -> Path:
        return Path(self.req.work_dir)

    def spec_common(self) -> dict[str, Any]:
        return {
            "workflow_type": self.wf,
            "model_name": self.sz.model_name,
            "execution_scenario": self.req.execution_scenario,
            "container_image": self.image,
            "docker_image": self.image,
            "success_patterns": PATTERNS[self.wf][0],
            "failure_patterns": PATTERNS[self.wf][1],
            "required_devices": self.sz.required_devices,
            "node_count": self.sz.nodes,
            "work_dir": str(self.work_dir),
            "repo_root": self.req.repo_root,
            "llm_models_root": self.models_root,
            "extra_files": self.extra_files,
            "warnings": self.warnings,
        }

    def result(self, spec: JobSpec) -> BuildResult:
        files = [*self.files, OutFile("job_spec.json", spec.to_json())]
        return BuildResult(spec, files, self.work_dir, self.warnings)


def assemble(
    req: Request,
    wf: str,
    env: SlurmEnv | None,
    env_raw: dict[str, Any] | None,
    facts: ClusterFacts | None,
    gpn: int,
    sz: Sizing,
    image: str,
    paths: Paths,
    models_root: str,
    site: SiteConfig,
    ask: mnt.Ask,
) -> BuildResult:
    job = Job(
        req,
        wf,
        sz,
        image,
        paths,
        models_root,
        f"{sz.model_name}_{SUFFIX[wf]}",
        warnings=list(sz.warnings),
    )
    home, project, models = base_mounts(req, env, paths, models_root, site, ask)
    extras = _custom_parts(job) if wf == "custom" else []
    job.mounts = mnt.assemble(home, project, models, extras)
    _commands(job)
    if not req.is_slurm:
        return _docker_result(job)
    assert facts is not None
    return _slurm_result(job, facts, gpn, env, env_raw, site)


def _custom_parts(job: Job) -> list[mnt.Mount]:
    """Category 3's exports and run script; returns the mounts the custom job adds."""
    req, paths = job.req, job.paths
    extras: list[mnt.Mount] = []
    custom_cmd = req.custom_cmd or ""
    if req.custom_script:
        if not Path(req.custom_script).is_file():
            raise BuildError(
                "custom_script",
                f"{req.custom_script} is not a file",
                "give the path of an existing script",
            )
        script_in_job = paths.to_script(req.repo_root, req.custom_script)
        if script_in_job is None:  # remote and outside the repo: ship it next to the job
            job.extra_files.append(req.custom_script)
            script_in_job = posixpath.join(paths.log_dir, posixpath.basename(req.custom_script))
        parent = posixpath.dirname(script_in_job)
        extras.append(
            mnt.Mount(mnt.check_mount_path(parent, "custom_script"), parent, "custom_script")
        )
        custom_cmd = "bash " + shlex.quote(script_in_job)
    pairs = parse_custom_env(req.custom_env)
    job.exports += [
        ("CUSTOM_COMMAND", custom_cmd),
        ("CUSTOM_ENV", " ".join(shlex.quote(f"{k}={v}") for k, v in pairs)),
        ("CUSTOM_WORKDIR", paths.project),
        ("llmSrcNode", paths.project),
    ]
    if req.is_slurm:
        job.run_script = posixpath.join(paths.log_dir, "slurm_run_custom.sh")
        extras.append(
            mnt.Mount(mnt.check_mount_path(paths.log_dir, "work_dir"), paths.log_dir, "work_dir")
        )
        job.files.append(
            OutFile("slurm_run_custom.sh", render("slurm_run_custom.sh.j2"), executable=True)
        )
        job.extra_files.insert(0, str(job.work_dir / "slurm_run_custom.sh"))
    return extras


def _commands(job: Job) -> None:
    """The command variables the in-container payloads read, per workflow."""
    req, paths = job.req, job.paths
    if job.wf == "pytest":
        job.run_cmd = req.test_cmd or ""
        rel = job.sz.workdir_rel
        workdir = posixpath.join(paths.project, rel) if rel else paths.project
        job.exports += [("TEST_WORKDIR", workdir), ("TEST_CMD", job.run_cmd)]
    elif job.wf == "eval":
        job.run_cmd = eval_cmd_with_local_model(
            req, paths, job.mounts, job.models_root, job.warnings
        )
        job.exports.append(("EVAL_CMD", job.run_cmd))
    elif job.wf == "bench":
        from trtllm_script_builder.resolve.commands import parse_bench

        b = parse_bench(req.bench_cmd or "")
        job.prep_cmd, job.run_cmd = b.prep, b.run
        job.warnings += _bench_file_warnings(b.files, job.mounts, req.is_slurm)
        if b.prep:
            job.exports.append(("PREP_CMD", b.prep))
        job.exports.append(("BENCH_CMD", b.run))


# enroot mounts a fresh tmpfs on these at every container start, so every srun sees them empty.
_CONTAINER_TMPFS = ("/tmp", "/var/run", "/var/lock")


def _bench_file_warnings(
    files: list[tuple[str, str]], mounts: list[mnt.Mount], slurm: bool
) -> list[str]:
    out = []
    for opt, path in files:
        # The command runs in the container: its paths are the container's.
        if mnt.in_a_mount(mounts, path):
            continue
        if not any(mnt.covers(t, path) for t in _CONTAINER_TMPFS):
            out.append(f"{opt} {path} is under no mount, so the container may not see or keep it")
        elif slurm:  # one `docker run` runs both steps: its /tmp lasts
            out.append(
                f"{opt} {path} is on the container's tmpfs, which every srun starts empty, so "
                "a file there does not outlive its step; use a mounted folder"
            )
    return out


def _title(job: Job, category: int) -> str:
    return f"{CATEGORY_TITLES[category]} for {job.sz.model_name} ({job.wf}, {job.req.execution_scenario})"


def _docker_result(job: Job) -> BuildResult:
    script = "docker_cmd.sh"
    args, payload = _docker(job)
    docker_cmd = shlex.join(
        ["docker", "run", *[w for line in args for w in line], "bash", "-c", payload]
    )
    text = render(
        "docker_cmd.sh.j2",
        s={
            "title": _title(job, 1),
            "version": __version__,
            "docker_args": args,
            "payload": payload,
        },
    )
    job.files.append(OutFile(script, text, executable=True))
    spec = JobSpec(
        category=1,
        script_path=str(job.work_dir / script),
        script_name=script,
        log_file=str(job.work_dir / f"{job.sz.model_name}_local.log"),
        docker_cmd=docker_cmd,
        **job.spec_common(),
    )
    return job.result(spec)


def _slurm_result(
    job: Job,
    facts: ClusterFacts,
    gpn: int,
    env: SlurmEnv | None,
    env_raw: dict[str, Any] | None,
    site: SiteConfig,
) -> BuildResult:
    req, sz, paths = job.req, job.sz, job.paths
    assert req.partition and req.account
    category = {"pytest": 2, "custom": 3, "eval": 5, "bench": 6}[job.wf]
    script = f"{job.name}.slurm"
    log_dir = sbatch_value(paths.log_dir, "remote_work_dir" if paths.remote else "work_dir")
    mounts_text = ",".join(m.entry() for m in job.mounts)
    ctx = {
        "title": _title(job, category),
        "version": __version__,
        "job_name": job.name,
        "log_out": f"{log_dir}/{job.name}_%j.out",
        "log_err": f"{log_dir}/{job.name}_%j.err",
        "nodes": sz.nodes,
        "ntasks": sz.ntasks,
        "ntasks_per_node": sz.ntasks_per_node,
        "gres": facts.gres,
        "time_limit": req.time_limit,
        "partition": req.partition,
        "account": req.account,
        "image": img.enroot_uri(job.image) if site.enroot_uri_rewrite else job.image,
        "container_name": job.name,
        "mounts": mounts_text,
        "project": paths.project,
        "llm_models_root": job.models_root,
        "exports": job.exports,
        "install": not req.skip_install,
        "eval_requirements": job.wf == "eval",
        "mpi": sz.mpi,
        "mpi_plugin": facts.mpi_plugin,
        "launcher": sz.launcher,
        "has_prep": bool(job.prep_cmd),
        "run_script": job.run_script,
    }
    job.files.insert(0, OutFile(script, render(f"{job.wf}.slurm.j2", s=ctx), executable=True))
    params = SlurmParams(
        partition=req.partition,
        account=req.account,
        time_limit=req.time_limit,
        nodes=sz.nodes,
        ntasks=sz.ntasks,
        ntasks_per_node=sz.ntasks_per_node,
        gpus_per_node=gpn,
        gres=facts.gres,
        mpi_plugin=facts.mpi_plugin,
    )
    spec = JobSpec(
        category=category,
        script_path=str(job.work_dir / script),
        script_name=script,
        log_file_pattern=f"{paths.log_dir}/{job.name}_%j.out",
        error_file_pattern=f"{paths.log_dir}/{job.name}_%j.err",
        slurm_params=params,
        slurm_env=env_raw,
        **job.spec_common(),
        **scenario_fields(req, paths, env, script, job.name, mounts_text),
    )
    return job.result(spec)


def _docker(job: Job) -> tuple[list[list[str]], str]:
    """The job's variables passed with `--env`, for the fixed payload to read."""
    from trtllm_script_builder.render.docker import docker_run

    d = dict(job.exports)
    env = [("PROJECT_PATH", job.paths.project), ("LLM_MODELS_ROOT", job.models_root)]
    run_cmd = job.run_cmd
    custom_env = job.wf == "custom" and bool(d["CUSTOM_ENV"])
    if job.wf == "custom":
        run_cmd = d["CUSTOM_COMMAND"]
        if custom_env:
            env.append(("CUSTOM_ENV", d["CUSTOM_ENV"]))
    if job.prep_cmd:
        env.append(("PREP_CMD", job.prep_cmd))
    env += [("RUN_WORKDIR", d.get("TEST_WORKDIR", job.paths.project)), ("RUN_CMD", run_cmd)]
    return docker_run(
        name=job.name,
        image=job.image,
        mounts=job.mounts,
        env=env,
        install=not job.req.skip_install,
        eval_requirements=job.wf == "eval",
        custom_env=custom_env,
        has_prep=bool(job.prep_cmd),
    )


def eval_cmd_with_local_model(
    req: Request, paths: Paths, mounts: list[mnt.Mount], models_root: str, warnings: list[str]
) -> str:
    """Every --model as the container sees it: a host path through its mount, and a Hugging
    Face id as the container path of a local copy when one exists under the models mount."""
    cmd = req.eval_cmd or ""
    for model in parse_eval(cmd).models:
        local = _model_in_container(model, paths, mounts, models_root, warnings)
        if local is not None and local != model:
            cmd = replace_option(cmd, "--model", model, local)
    return cmd


def _model_in_container(
    model: str, paths: Paths, mounts: list[mnt.Mount], models_root: str, warnings: list[str]
) -> str | None:
    if model.startswith("/"):
        inside = mnt.host_to_container(mounts, model)
        if inside is None:
            warnings.append(f"--model {model} is under no mount, so the container may not see it")
        return inside
    if "/" not in model:
        return None
    root = models_root.rstrip("/") or "/"
    host_root = next((m.host for m in mounts if m.target.rstrip("/") == root), None)
    if paths.remote or host_root is None:
        warnings.append(
            f"--model {model} is a Hugging Face id that could not be looked up locally; it will be downloaded unless the job finds it"
        )
        return None
    found = find_model_dir(Path(host_root), model)
    if found is None:
        warnings.append(
            f"--model {model} was not found under {host_root} (depth 3); trtllm-eval will try to download it"
        )
        return None
    return mnt.host_to_container(mounts, str(found)) or str(found)
