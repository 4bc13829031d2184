"""Step 3 per workflow: GPUs, nodes, tasks, MPI and the model name, from the command itself."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.values import whole_number
from trtllm_script_builder.resolve.commands import model_from_path, parse_bench, parse_eval
from trtllm_script_builder.resolve.pytest_sizing import size_pytest
from trtllm_script_builder.slurm_time import parse_time_minutes

LAUNCHER = "trtllm-llmapi-launch"  # a command that already has it must not get it twice
PYTEST_MAX_DEVICES = 8
CUSTOM_MAX_DEVICES = 8


@dataclass
class Sizing:
    required_devices: int
    nodes: int
    ntasks: int
    model_name: str
    mpi: bool = False  # the run srun carries --mpi
    launcher: bool = False  # trtllm-llmapi-launch in front of the run command
    workdir_rel: str = ""  # where, under the project, the command runs
    warnings: list[str] = field(default_factory=list)
    fallback_to_perf: bool = False  # eval wider than a node (decision 22)

    @property
    def ntasks_per_node(self) -> int:
        return self.ntasks // self.nodes


def _one_node(req: Request, what: str) -> None:
    if req.node_count is not None and req.node_count > 1:
        raise BuildError(
            "node_count",
            f"{req.node_count} nodes asked, but {what} runs on one node",
            "drop --node-count or set it to 1",
        )


def _wider_node(req: Request) -> str:
    if req.is_slurm:
        return "choose a partition with more GPUs per node"
    return "run it on a machine with more GPUs, or on Slurm"


def size_pytest_job(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.test_cmd is not None
    found = size_pytest(req.test_cmd, Path(req.repo_root))
    warnings = list(found.notes)
    if found.devices is not None:
        devices, source = found.devices, found.source
        if req.required_devices is not None and req.required_devices != devices:
            warnings.append(
                f"required_devices {req.required_devices} from the request differs from {source}; using {devices}"
            )
    else:
        devices = req.required_devices or 1
        source = (
            "the request's required_devices"
            if req.required_devices
            else "the default of 1 (no GPU marker found)"
        )
    if devices > PYTEST_MAX_DEVICES:
        raise BuildError(
            "required_devices",
            f"{devices} (from {source}) exceeds the maximum of {PYTEST_MAX_DEVICES} GPUs for pytest",
            "select a test that fits one node",
        )
    if devices > gpn:
        raise BuildError(
            "required_devices",
            f"{devices} (from {source}) is more than the {gpn} GPUs per node of {gpn_source}; pytest runs on one node",
            _wider_node(req),
        )
    _one_node(req, "pytest")
    warnings += _timeout_warning(req)
    return Sizing(
        devices,
        1,
        1,
        req.model_name or found.model_name,
        workdir_rel=found.workdir_rel,
        warnings=warnings,
    )


_PYTEST_TIMEOUT = re.compile(r"(?:^|\s)--timeout[= ](\d+)(?=\s|$)")


def _timeout_warning(req: Request) -> list[str]:
    """pytest's --timeout is per test; at or past the Slurm limit, Slurm ends the job first."""
    m = _PYTEST_TIMEOUT.search(req.test_cmd or "")
    if not m or not req.is_slurm:
        return []
    limit, seconds = parse_time_minutes(req.time_limit), whole_number(m.group(1))
    if limit is None or (seconds is not None and seconds < limit * 60):
        return []
    return [
        f"pytest --timeout={m.group(1)} (seconds, per test) is not below the Slurm time limit "
        f"{req.time_limit}: Slurm would end the job before pytest reports; raise --time-limit"
    ]


def size_eval_job(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.eval_cmd is not None
    ev = parse_eval(req.eval_cmd)
    model = req.model_name or model_from_path(ev.model) or "eval"
    node_gpus = ev.gpus_per_node or gpn
    ws = ev.world_size
    notes = _devices_note(req, ws, f"tp {ev.tp} x pp {ev.pp} of eval_cmd")
    if ws > node_gpus:
        nodes = math.ceil(ws / node_gpus)
        return Sizing(ws, nodes, ws, model, fallback_to_perf=True, warnings=notes)
    _one_node(req, "trtllm-eval")
    if "trtllm-eval" not in req.eval_cmd:
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


def size_bench_job(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.bench_cmd is not None
    b = parse_bench(req.bench_cmd)
    model = req.model_name or model_from_path(b.model) or "bench"
    ws = b.world_size
    if ws > gpn:
        raise BuildError(
            "required_devices",
            f"{ws} (tp {b.tp} x pp {b.pp} of the last trtllm-bench call) is more than the {gpn} GPUs per node of {gpn_source}; trtllm-bench runs on one node",
            "lower --tp/--pp or " + _wider_node(req),
        )
    _one_node(req, "trtllm-bench")
    return Sizing(
        ws,
        1,
        ws,
        model,
        mpi=ws > 1,
        launcher=ws > 1 and LAUNCHER not in b.run,
        warnings=_devices_note(req, ws, f"tp {b.tp} x pp {b.pp} of the last trtllm-bench call"),
    )


def _devices_note(req: Request, devices: int, source: str) -> list[str]:
    """The command decides the GPU count; a different one in the request is named, not used."""
    if req.required_devices is None or req.required_devices == devices:
        return []
    return [
        f"required_devices {req.required_devices} from the request differs from {source}; using {devices}"
    ]


def size_custom_job(req: Request, gpn: int, gpn_source: str) -> Sizing:
    devices = req.required_devices or 1
    if devices > CUSTOM_MAX_DEVICES:
        raise BuildError(
            "required_devices",
            f"{devices} exceeds the maximum of {CUSTOM_MAX_DEVICES} GPUs for a custom job",
            "ask for at most 8",
        )
    nodes = math.ceil(devices / gpn)
    if nodes != 1:
        raise BuildError(
            "required_devices",
            f"{devices} needs {nodes} nodes at {gpn} GPUs per node ({gpn_source}); a custom job runs on one node",
            "ask for at most one node's GPUs",
        )
    _one_node(req, "a custom job")
    model = (
        req.model_name
        or model_from_path(Path(req.custom_script).stem if req.custom_script else None)
        or "custom"
    )
    return Sizing(devices, 1, 1, model)  # one task sees every GPU of the job (decision 25)
