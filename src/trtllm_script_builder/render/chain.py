"""import.slurm and compile.slurm: the jobs a test job waits for
(decisions compile-chain and image-import-cache)."""

from __future__ import annotations

from typing import Any

from trtllm_script_builder import __version__
from trtllm_script_builder.model.jobspec import OutFile
from trtllm_script_builder.render import render
from trtllm_script_builder.resolve.compile import BUILD_WHEEL
from trtllm_script_builder.resolve.resolved import ResolvedJob


def render_chain(job: ResolvedJob, test_ctx: dict[str, Any]) -> list[OutFile]:
    """The chain's scripts, with the test job's partition, account, time limit and log folder."""
    chain = job.chain
    assert chain is not None
    log_dir = job.paths.log_dir.replace("%", "%%")  # as the test job's #SBATCH lines
    files = []

    def header(name: str, title: str) -> dict[str, Any]:
        return {
            "title": f"{title} for {job.model_name} ({job.workflow}, {job.scenario})",
            "version": __version__,
            "job_name": name,
            "log_out": f"{log_dir}/{name}_%j.out",
            "log_err": f"{log_dir}/{name}_%j.err",
            "time_limit": test_ctx["time_limit"],
            "partition": chain.partition or test_ctx["partition"],
            "account": test_ctx["account"],
            "exclusive": False,
            "singleton": False,
            "cpus_per_task": chain.cpus_per_task,
            "mem": chain.mem,
        }

    imp = chain.image_import
    if imp is not None:
        ctx = {**header(imp.name, "Image import job"), "uri": imp.uri, "sqsh": imp.sqsh}
        files.append(OutFile(imp.script, render("import.slurm.j2", s=ctx), executable=True))
    comp = chain.compile
    if comp is not None:
        ctx = {
            **header(comp.name, "Compile job (the wheel of the checkout)"),
            # a CPU partition's whole node for the parallel build (decision compile-no-gpus)
            "exclusive": chain.partition is not None,
            # one compile of the checkout at a time: one job name per checkout
            # (decision one-compile-per-checkout)
            "job_name": comp.job_name or comp.name,
            "singleton": True,
            "image": comp.image,
            "mounts": comp.mounts_text,
            "project": job.paths.project,
            "wheel_dir": comp.wheel_dir,
            "build_wheel": BUILD_WHEEL,
            "args": list(comp.args),
            "job_count": comp.job_count,
            "build_dir": comp.build_dir,
        }
        files.append(OutFile(comp.script, render("compile.slurm.j2", s=ctx), executable=True))
    return files
