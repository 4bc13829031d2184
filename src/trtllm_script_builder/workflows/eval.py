"""eval: trtllm-eval (Category 5), on one node or across nodes (decision launcher-words)."""

from __future__ import annotations

from typing import Any

from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.commands import (
    launch_words,
    model_from_path,
    parse_eval,
    replace_option,
    without_launcher,
)
from trtllm_script_builder.resolve.job import local_copy
from trtllm_script_builder.resolve.resolved import Paths
from trtllm_script_builder.resolve.workflow import (
    Draft,
    Sizing,
    Workflow,
    by_world_size,
    devices_note,
)

NAME = "eval"
TOOL = "trtllm-eval"


def size(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.eval_cmd is not None
    ev = parse_eval(req.eval_cmd)
    model = req.model_name or model_from_path(ev.model) or NAME
    ws = ev.world_size
    sz = by_world_size(
        req, ws, ev.gpus_per_node or gpn, f"tp {ev.tp} x pp {ev.pp} of eval_cmd", model
    )
    sz.warnings += devices_note(req, ws, f"tp {ev.tp} x pp {ev.pp} of eval_cmd")
    if TOOL not in req.eval_cmd:
        sz.warnings.append(
            "eval_cmd runs no trtllm-eval, so it is sized from its --tp_size/--pp_size (1 GPU "
            "without them); for another command use custom_cmd"
        )
    return sz


def _command(d: Draft, mounts: list[mnt.Mount]) -> None:
    d.run_cmd = eval_cmd_with_local_model(d.req, d.paths, mounts, d.models_root, d.warnings)
    d.run_cmd = without_launcher(d.run_cmd)
    if d.sizing.launcher:
        d.run_cmd = launch_words(d.run_cmd, "eval_cmd", d.warnings)
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
        if inside is None and mnt.in_a_mount(mounts, model):
            return model  # already the container's path, e.g. under llm_models_root
        if inside is None:
            warnings.append(f"--model {model} is under no mount, so the container may not see it")
        return inside
    if "/" not in model:
        return None
    return local_copy(model, paths, mounts, models_root, TOOL, warnings)


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
    eval_requirements=True,
    job_name=_job_name,
)
