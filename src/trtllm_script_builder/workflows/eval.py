"""eval: trtllm-eval on one node (Category 5), or across nodes through submit.py
(decision multi-node-eval)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.commands import model_from_path, parse_eval, replace_option
from trtllm_script_builder.resolve.job import local_copy
from trtllm_script_builder.resolve.resolved import Paths
from trtllm_script_builder.resolve.slurm import ClusterFacts
from trtllm_script_builder.resolve.workflow import (
    LAUNCHER,
    Draft,
    Sizing,
    Workflow,
    devices_note,
    one_node,
)

if TYPE_CHECKING:
    from trtllm_script_builder.resolve.perf.plan import PerfPlan

NAME = "eval"
TOOL = "trtllm-eval"


def size(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.eval_cmd is not None
    ev = parse_eval(req.eval_cmd)
    model = req.model_name or model_from_path(ev.model) or NAME
    node_gpus = ev.gpus_per_node or gpn
    ws = ev.world_size
    notes = devices_note(req, ws, f"tp {ev.tp} x pp {ev.pp} of eval_cmd")
    if ws > node_gpus:
        nodes = math.ceil(ws / node_gpus)
        return Sizing(ws, nodes, ws, model, fallback_to_perf=True, warnings=notes)
    one_node(req, TOOL)
    if TOOL not in req.eval_cmd:
        notes.append(
            "eval_cmd runs no trtllm-eval, so it is sized from its --tp_size/--pp_size (1 GPU "
            "without them); for another command use custom_cmd"
        )
    # One rank outside MPI: trtllm-eval's single-GPU path spawns its worker
    # (decision one-rank-no-mpi).
    return Sizing(
        ws,
        1,
        ws,
        model,
        mpi=ws > 1,
        launcher=ws > 1 and LAUNCHER not in req.eval_cmd,
        warnings=notes,
    )


def _command(d: Draft, mounts: list[mnt.Mount]) -> None:
    d.run_cmd = eval_cmd_with_local_model(d.req, d.paths, mounts, d.models_root, d.warnings)
    d.exports.append(("EVAL_CMD", d.run_cmd))


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
    return local_copy(model, paths, mounts, models_root, TOOL, warnings)


def _across_nodes(d: Draft, mounts: list[mnt.Mount], facts: ClusterFacts) -> PerfPlan:
    """An eval wider than a node runs as an aggregated perf config through submit.py
    (decision multi-node-eval)."""
    # Only such an eval reads perf configs (and PyYAML): a build imports it when it needs it.
    from trtllm_script_builder.resolve.perf.plan import plan_eval_fallback

    ev = parse_eval(d.req.eval_cmd or "")
    cmd = eval_cmd_with_local_model(d.req, d.paths, mounts, d.models_root, d.warnings)
    node_gpus = ev.gpus_per_node or facts.gpus_per_node
    sz = d.sizing
    plan = plan_eval_fallback(
        model_name=sz.model_name,
        model_path=parse_eval(cmd).model or ev.model or sz.model_name,
        tp=ev.tp,
        pp=ev.pp,
        gpus_per_node=node_gpus,
        task=ev.task,
        # submit.py runs here, on local paths (decision perf-sanity-submit-py)
        work_dir=d.req.work_dir,
    )
    d.warnings.append(
        f"eval needs {sz.required_devices} GPUs, more than one node's {node_gpus}: "
        "it runs through submit.py with accuracy.enable_accuracy_test; the submit.py versions read so far "
        "wire the accuracy runner for disaggregated configs only (decision aggregated-fallback-warning)"
    )
    return plan


def _job_name(item: dict[str, Any]) -> str | None:
    if not isinstance(item.get("eval_cmd"), str):
        return None
    model = model_from_path(parse_eval(item["eval_cmd"]).model)
    return f"{model}_{NAME}" if model else NAME


EVAL = Workflow(
    name=NAME,
    commands=("eval_cmd",),
    infer_rank=3,
    infers=lambda req: bool(req.eval_cmd),
    suffix=NAME,
    category=5,
    patterns=(("accuracy:", "score:", "rouge1:"), ("AssertionError", "Error")),
    size=size,
    aliases=(TOOL, "5"),
    tool=TOOL,
    model_options=("--model",),
    command=_command,
    across_nodes=_across_nodes,
    eval_requirements=True,
    job_name=_job_name,
)
