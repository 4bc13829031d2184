"""custom: any command or script in the job's container, as one task (Category 3)."""

from __future__ import annotations

import math
import posixpath
import shlex
from pathlib import Path
from typing import Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.backend import queued
from trtllm_script_builder.resolve.commands import model_from_path, parse_custom_env
from trtllm_script_builder.resolve.workflow import Draft, Sizing, Workflow, one_node

NAME = "custom"
MAX_DEVICES = 8
RUN_SCRIPT = "slurm_run_custom.sh"  # on Slurm the job's srun runs this helper (its template)


def size(req: Request, gpn: int, gpn_source: str) -> Sizing:
    devices = req.required_devices or 1
    if devices > MAX_DEVICES:
        raise BuildError(
            "required_devices",
            f"{devices} exceeds the maximum of {MAX_DEVICES} GPUs for a custom job",
            "ask for at most 8",
        )
    nodes = math.ceil(devices / gpn)
    if nodes != 1:
        raise BuildError(
            "required_devices",
            f"{devices} needs {nodes} nodes at {gpn} GPUs per node ({gpn_source}); a custom job runs on one node",
            "ask for at most one node's GPUs",
        )
    one_node(req, "a custom job")
    model = (
        req.model_name
        or model_from_path(Path(req.custom_script).stem if req.custom_script else None)
        or NAME
    )
    # one task sees every GPU of the job (decision custom-one-task)
    return Sizing(devices, 1, 1, model)


def _prepare(d: Draft) -> None:
    """Category 3's exports, the mounts the custom job adds and its in-job run script."""
    req, paths = d.req, d.paths
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
            d.extra_files.append(req.custom_script)
            script_in_job = posixpath.join(paths.log_dir, posixpath.basename(req.custom_script))
        parent = posixpath.dirname(script_in_job)
        d.extras.append(
            mnt.Mount(mnt.check_mount_path(parent, "custom_script"), parent, "custom_script")
        )
        custom_cmd = "bash " + shlex.quote(script_in_job)
    pairs = parse_custom_env(req.custom_env)
    d.exports += [
        ("CUSTOM_COMMAND", custom_cmd),
        ("CUSTOM_ENV", " ".join(shlex.quote(f"{k}={v}") for k, v in pairs)),
        ("CUSTOM_WORKDIR", paths.project),
        ("llmSrcNode", paths.project),
    ]
    d.run_cmd = custom_cmd  # what the Docker payload runs; on Slurm the run script reads it
    if queued(req):
        d.run_script = posixpath.join(paths.log_dir, RUN_SCRIPT)
        d.extras.append(
            mnt.Mount(mnt.check_mount_path(paths.log_dir, "work_dir"), paths.log_dir, "work_dir")
        )
        d.extra_files.insert(0, str(Path(req.work_dir) / RUN_SCRIPT))


def _job_name(item: dict[str, Any]) -> str | None:
    if isinstance(item.get("custom_script"), str):
        model = model_from_path(Path(item["custom_script"]).stem)
        return f"{model}_{NAME}" if model else NAME
    return NAME if item.get("custom_cmd") else None


CUSTOM = Workflow(
    name=NAME,
    commands=("custom_cmd", "custom_script"),
    infer_rank=1,
    infers=lambda req: bool(req.custom_cmd or req.custom_script),
    suffix=NAME,
    category=3,
    patterns=(("Custom command finished with exit code 0",), ("Error", "Traceback")),
    size=size,
    aliases=("3",),
    prepare=_prepare,
    job_name=_job_name,
)
