"""eval: trtllm-eval on one node (Category 5), or across nodes through submit.py (decision 22)."""

from __future__ import annotations

import math
from typing import Any

from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.commands import model_from_path, parse_eval
from trtllm_script_builder.resolve.job import eval_cmd_with_local_model
from trtllm_script_builder.resolve.workflow import (
    LAUNCHER,
    Draft,
    Sizing,
    Workflow,
    devices_note,
    one_node,
)

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
    # One rank outside MPI: trtllm-eval's single-GPU path spawns its worker (decision 28).
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
